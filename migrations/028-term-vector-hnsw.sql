-- Term expansion finds the words nearest a query through an HNSW index per generation on
-- kb.term_vector (term_vector_hnsw_<id>), instead of reading every word's vector: the
-- kb_index trigger (kb._kb_index_hnsw, sql/050-teams.sql) makes it with the generation's
-- chunk index from now on; this makes it for the generations that exist. The planner
-- takes it once it knows that a generation's rows are one KB's (the same statistics as
-- the other per-generation tables', migration 015).
CREATE STATISTICS IF NOT EXISTS kb.term_vector_kb_of_index (dependencies)
  ON index_id, kb_id FROM kb.term_vector;
DO $$
DECLARE
  r     record;
  v_typ text;
BEGIN
  FOR r IN SELECT i.id, i.embedding_dim FROM kb.kb_index i WHERE i.embedding_dim <= 4000 LOOP
    v_typ := CASE WHEN r.embedding_dim > 2000 THEN 'halfvec' ELSE 'vector' END;
    EXECUTE format(
      'CREATE INDEX IF NOT EXISTS %I ON kb.term_vector USING hnsw ((embedding::%s(%s)) %s) '
      'WHERE index_id = %s',
      'term_vector_hnsw_' || r.id, v_typ, r.embedding_dim, v_typ || '_cosine_ops', r.id);
  END LOOP;
END
$$;
