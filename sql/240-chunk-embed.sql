-- ChunkEmbed's own step of a job (kb.process_job calls kb._store_<strategy>): its chunks
-- are stored by the job itself; what it adds is the knowledge graph, where the KB has one
-- (sql/280-284). Its search is the shared one (sql/400-440).

CREATE OR REPLACE FUNCTION kb._store_chunk_embed(p_kb_id integer, p_index_id bigint,
                                                 p_document_id bigint, p_artifacts jsonb,
                                                 p_chunk_ids jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM kb._store_knowledge_graph(p_kb_id, p_index_id, p_document_id, p_artifacts->'graph',
                                    p_chunk_ids);
END
$$;
COMMENT ON FUNCTION kb._store_chunk_embed(integer, bigint, bigint, jsonb, jsonb) IS
  'Internal: a ChunkEmbed document''s own tables: its knowledge graph, when the KB has one.';
