-- Doc2JSON's table: the fields extracted from each document, with where each value came from.

CREATE OR REPLACE FUNCTION kb._store_doc2json(p_kb_id integer, p_index_id bigint,
                                              p_document_id bigint, p_artifacts jsonb,
                                              p_chunk_ids jsonb)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- The document's old row went with its old chunk (ON DELETE CASCADE).
  INSERT INTO kb.doc2json_document (index_id, kb_id, document_id, chunk_id, fields, summary,
                                    sources, errors, windows, mode)
  VALUES (p_index_id, p_kb_id, p_document_id, (p_chunk_ids->>'0')::bigint, p_artifacts->'fields',
          p_artifacts->>'summary', p_artifacts->'sources', p_artifacts->'errors',
          p_artifacts->'windows', p_artifacts->>'mode')
$$;
COMMENT ON FUNCTION kb._store_doc2json(integer, bigint, bigint, jsonb, jsonb) IS
  'Internal: writes one document''s Doc2JSON extraction for an index generation.';

CREATE OR REPLACE VIEW kb.doc2json_documents WITH (security_invoker = true) AS
  SELECT k.name AS kb, d.title AS document, x.document_id, x.fields, x.summary, x.sources,
         x.errors, jsonb_array_length(x.errors) AS error_count,
         jsonb_array_length(x.windows) AS window_count, x.windows, x.mode, x.chunk_id, x.kb_id
  FROM kb.doc2json_document x
  JOIN kb.knowledge_base k ON k.id = x.kb_id AND k.active_index_id = x.index_id
  JOIN kb.document d ON d.kb_id = x.kb_id AND d.id = x.document_id;
COMMENT ON VIEW kb.doc2json_documents IS
  'The serving Doc2JSON extraction of every document: fields (SELECT fields->>''vendor_name''), '
  'summary, sources (per value path: the window and the character span of the text it came '
  'from, and how it matched), errors (values refused for their type, per field) and windows.';
GRANT SELECT ON kb.doc2json_documents TO PUBLIC;
