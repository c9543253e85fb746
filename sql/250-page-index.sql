-- PageIndex's tables: the section tree and the per-document table of contents.
-- kb.process_job stores a page_index build through kb._store_page_index; the nodes' text
-- lives in kb.chunk (one chunk per node), so BM25 and context assembly serve it as-is.

CREATE OR REPLACE FUNCTION kb._store_page_index(p_index_id bigint, p_document_id bigint,
                                                p_artifacts jsonb, p_chunk_ids jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  -- The document's old nodes went with its old chunks (ON DELETE CASCADE).
  DELETE FROM kb.page_index_toc WHERE index_id = p_index_id AND document_id = p_document_id;
  INSERT INTO kb.page_index_node (index_id, document_id, node_id, chunk_id, parent_id, ordinal,
                                  depth, title, summary, summary_kind, page_start, page_end,
                                  section_end)
  SELECT p_index_id, p_document_id, n->>'node_id', (p_chunk_ids->>(n->>'ordinal'))::bigint,
         n->>'parent_id', (n->>'ordinal')::integer, (n->>'depth')::integer, n->>'title',
         n->>'summary', n->>'summary_kind', (n->>'page_start')::integer,
         (n->>'page_end')::integer, (n->>'section_end')::integer
  FROM jsonb_array_elements(p_artifacts->'nodes') AS n;
  INSERT INTO kb.page_index_toc (index_id, document_id, description, description_kind, toc,
                                 node_count)
  VALUES (p_index_id, p_document_id, p_artifacts->>'description',
          p_artifacts->>'description_kind', p_artifacts->'toc',
          jsonb_array_length(p_artifacts->'nodes'));
END
$$;
COMMENT ON FUNCTION kb._store_page_index(bigint, bigint, jsonb, jsonb) IS
  'Internal: writes one document''s PageIndex tree (nodes and ToC) for an index generation.';

CREATE OR REPLACE VIEW kb.page_index_nodes AS
  SELECT k.name AS kb, d.title AS document, n.document_id, n.node_id, n.parent_id, n.depth,
         n.ordinal, n.title, c.heading_path AS title_path, n.summary, n.summary_kind,
         n.page_start, n.page_end, c.char_start, c.char_end, n.section_end, c.token_count,
         c.content AS text, n.chunk_id
  FROM kb.page_index_node n
  JOIN kb.knowledge_base k ON k.active_index_id = n.index_id
  JOIN kb.document d ON d.id = n.document_id
  JOIN kb.chunk c ON c.id = n.chunk_id;
COMMENT ON VIEW kb.page_index_nodes IS
  'The serving PageIndex nodes of every KB, in reading order per document, with their text, '
  'title path, summary and page range. char_start/char_end is the node''s own text; '
  'section_end where its whole section (children included) ends.';
