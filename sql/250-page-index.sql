-- PageIndex's tables: the section tree and the per-document table of contents.
-- kb.process_job stores a page_index build through kb._store_page_index; the nodes' text
-- lives in kb.chunk (one chunk per node), so BM25 and context assembly serve it as-is.

CREATE OR REPLACE FUNCTION kb._store_page_index(p_kb_id integer, p_index_id bigint,
                                                p_document_id bigint, p_artifacts jsonb,
                                                p_chunk_ids jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  -- The document's old nodes went with its old chunks (ON DELETE CASCADE).
  DELETE FROM kb.page_index_toc
   WHERE kb_id = p_kb_id AND index_id = p_index_id AND document_id = p_document_id;
  INSERT INTO kb.page_index_node (index_id, kb_id, document_id, node_id, chunk_id, parent_id,
                                  ordinal, depth, title, summary, summary_kind, page_start,
                                  page_end, section_end)
  SELECT p_index_id, p_kb_id, p_document_id, n->>'node_id', (p_chunk_ids->>(n->>'ordinal'))::bigint,
         n->>'parent_id', (n->>'ordinal')::integer, (n->>'depth')::integer, n->>'title',
         n->>'summary', n->>'summary_kind', (n->>'page_start')::integer,
         (n->>'page_end')::integer, (n->>'section_end')::integer
  FROM jsonb_array_elements(p_artifacts->'nodes') AS n;
  INSERT INTO kb.page_index_toc (index_id, kb_id, document_id, description, description_kind,
                                 toc, node_count, structure, structure_detail)
  VALUES (p_index_id, p_kb_id, p_document_id, p_artifacts->>'description',
          p_artifacts->>'description_kind', p_artifacts->'toc',
          jsonb_array_length(p_artifacts->'nodes'),
          coalesce(p_artifacts->>'structure', 'markdown_headings'),
          p_artifacts - ARRAY['nodes', 'toc', 'description', 'description_kind', 'structure']);
END
$$;
COMMENT ON FUNCTION kb._store_page_index(integer, bigint, bigint, jsonb, jsonb) IS
  'Internal: writes one document''s PageIndex tree (nodes and ToC) for an index generation.';

CREATE OR REPLACE VIEW kb.page_index_nodes WITH (security_invoker = true) AS
  SELECT k.name AS kb, d.title AS document, n.document_id, n.node_id, n.parent_id, n.depth,
         n.ordinal, n.title, c.heading_path AS title_path, n.summary, n.summary_kind,
         n.page_start, n.page_end, c.char_start, c.char_end, n.section_end, c.token_count,
         c.content AS text, n.chunk_id, n.kb_id
  FROM kb.page_index_node n
  JOIN kb.knowledge_base k ON k.id = n.kb_id AND k.active_index_id = n.index_id
  JOIN kb.document d ON d.kb_id = n.kb_id AND d.id = n.document_id
  JOIN kb.chunk c ON c.kb_id = n.kb_id AND c.id = n.chunk_id;
COMMENT ON VIEW kb.page_index_nodes IS
  'The serving PageIndex nodes of every KB, in reading order per document, with their text, '
  'title path, summary and page range. char_start/char_end is the node''s own text; '
  'section_end where its whole section (children included) ends.';
GRANT SELECT ON kb.page_index_nodes TO PUBLIC;  -- rows as the caller's policies allow

CREATE OR REPLACE FUNCTION kb.tree_search(kb text, query text, top_k integer DEFAULT NULL,
                                          options jsonb DEFAULT NULL)
RETURNS TABLE (rank integer, document_id bigint, document text, node_id text,
               title_path text[], page_start integer, page_end integer, content text,
               summary text, reasoning text, chunk_id bigint, note text, phases jsonb,
               usage jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb   kb.knowledge_base;
  v_ix   kb.kb_index;
  v_prep kb.prepared_query;
BEGIN
  v_kb := kb._get_kb(kb);
  PERFORM kb._check_query(query);
  v_ix := kb._active_index(v_kb);
  v_prep := kb._prepare_query(v_ix.indexing_config, v_kb.retrieval_config,
              kb._overrides(jsonb_build_object('method', 'tree_search', 'top_k', top_k), options),
              query);
  RETURN QUERY
  SELECT t.rank, n.document_id, d.title, n.node_id, c.heading_path, n.page_start, n.page_end,
         c.content, n.summary, t.reasoning, t.chunk_id, t.note, t.phases, t.usage
  FROM kb._tree_search(v_kb.id, v_ix.id, query, v_prep.config, v_ix.indexing_config) t
  LEFT JOIN kb.page_index_node n ON n.chunk_id = t.chunk_id AND n.kb_id = v_kb.id
  LEFT JOIN kb.chunk c ON c.id = t.chunk_id AND c.kb_id = v_kb.id
  LEFT JOIN kb.document d ON d.id = n.document_id AND d.kb_id = v_kb.id
  ORDER BY t.rank NULLS LAST;
END
$$;
COMMENT ON FUNCTION kb.tree_search(text, text, integer, jsonb) IS
  'PageIndex Tree Search with everything it knows: per result the document, node id, title '
  'path, page range, text, summary and the model''s reasoning; the first row (or a lone row '
  'with no node when nothing matched) carries the note, what each phase saw and chose, and '
  'the LLM tokens and cost. kb.search(method => ''tree_search'') returns the same nodes in '
  'its usual shape. Writes nothing (runs on a standby).';

-- PageIndex's search of its own (method tree_search; kb._search_core calls it): the LLM
-- reads the trees' ToCs (kbpg_db/features/page_index/tree_search.py) and ranks the
-- sections as it chose.
CREATE OR REPLACE FUNCTION kb._search_page_index(p_plan kb.search_plan, p_query text,
    OUT rows kb.search_stage[], OUT plan kb.search_plan)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_tree kb.tree_hit[];
  v_plan kb.search_plan := p_plan;
BEGIN
  v_tree := ARRAY(SELECT t FROM kb._tree_search(p_plan.kb_id, p_plan.index_id, p_query,
                                                p_plan.config, p_plan.indexing_config) t);
  v_plan.note := v_tree[1].note;
  v_plan.usage := coalesce(v_plan.usage, '{}') || jsonb_build_object('llm', v_tree[1].usage);
  plan := v_plan;
  rows := ARRAY(
    SELECT ROW(t.chunk_id, NULL, NULL, NULL, NULL, t.rank, 1.0 / t.rank, NULL, NULL)::kb.search_stage
    FROM unnest(v_tree) t WHERE t.chunk_id IS NOT NULL ORDER BY t.rank);
END
$$;
COMMENT ON FUNCTION kb._search_page_index(kb.search_plan, text) IS
  'Internal: a PageIndex KB''s search (Tree Search): the sections the LLM chose, in its '
  'order, and the plan with its note and the LLM''s usage.';
