-- A search's channels, each a ranked list of candidates for fusion (sql/420): the vectors
-- (HNSW, here) and BM25 (sql/300); the knowledge graph's is kb._graph_channel (sql/283).
-- Each gives a candidate's rank, its score and z, the score as standard deviations above
-- its list's mean (fusion zscore; a list whose scores are all equal gives 0).

CREATE OR REPLACE FUNCTION kb._hnsw_default_ef(p_index_id bigint) RETURNS integer
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- Read from the index's own options, so a graph built with a lower ef_construction
  -- keeps the ef its recall needs until the KB is reindexed (docs/performance.md).
  SELECT CASE WHEN coalesce(max(substr(o, 17)::integer), 64) >= 256 THEN 100 ELSE 200 END
  FROM pg_class c, unnest(c.reloptions) o
  WHERE c.oid = to_regclass('kb.embedding_hnsw_' || p_index_id) AND o LIKE 'ef_construction=%'
$$;
COMMENT ON FUNCTION kb._hnsw_default_ef(bigint) IS
  'Internal: the ef_search a search of an index generation uses when none is given: 100 on '
  'graphs built with ef_construction 256 or more, 200 on graphs built before.';

CREATE OR REPLACE FUNCTION kb._vector_search(kb_id integer, index_id bigint,
                                             query_embedding real[], top_k integer,
                                             filter jsonb, ef_search integer)
RETURNS TABLE (chunk_id bigint, similarity double precision)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_dim    integer;
  v_typ    text;
  v_old_ef text := current_setting('hnsw.ef_search', true);
  v_old_it text := current_setting('hnsw.iterative_scan', true);
BEGIN
  SELECT i.embedding_dim INTO v_dim FROM kb.kb_index i
   WHERE i.id = _vector_search.index_id AND i.kb_id = _vector_search.kb_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'index generation % does not exist', index_id USING ERRCODE = 'no_data_found';
  END IF;
  IF coalesce(array_length(query_embedding, 1), 0) <> v_dim THEN
    RAISE EXCEPTION 'query vector has % dimensions but the knowledge base stores % dimensions',
      coalesce(array_length(query_embedding, 1), 0), v_dim
      USING ERRCODE = 'data_exception', HINT = 'embed the query with the knowledge base''s model';
  END IF;
  v_typ := kb._vector_type(v_dim);
  -- Iterative scans keep a filtered HNSW search going until top_k rows pass the filter.
  PERFORM set_config('hnsw.ef_search',
                     greatest(coalesce(ef_search, kb._hnsw_default_ef(index_id)), top_k)::text,
                     true);
  PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
  RETURN QUERY EXECUTE format($q$
    WITH nn AS MATERIALIZED (
      SELECT e.chunk_id, e.embedding::%1$s(%2$s) <=> $1::%1$s(%2$s) AS dist
      FROM kb.embedding e %4$s
      WHERE e.index_id = %3$s AND e.kb_id = %6$s %5$s
      ORDER BY e.embedding::%1$s(%2$s) <=> $1::%1$s(%2$s)
      LIMIT $2)
    SELECT nn.chunk_id, 1 - nn.dist FROM nn ORDER BY nn.dist, nn.chunk_id$q$,
    v_typ, v_dim, index_id,
    CASE WHEN filter IS NOT NULL THEN 'JOIN kb.chunk c ON c.id = e.chunk_id' ELSE '' END,
    CASE WHEN filter IS NOT NULL THEN 'AND c.kb_id = e.kb_id AND c.metadata @> $3' ELSE '' END,
    kb_id)
  USING query_embedding::vector, top_k, filter;
  PERFORM set_config('hnsw.ef_search', coalesce(v_old_ef, '40'), true);
  PERFORM set_config('hnsw.iterative_scan', coalesce(v_old_it, 'off'), true);
END
$$;
COMMENT ON FUNCTION kb._vector_search(integer, bigint, real[], integer, jsonb, integer) IS
  'Internal: kb.vector_search within one knowledge base: every statement reads that kb_id''s '
  'rows only (what Citus routes to the node holding the KB; docs/operations.md, "Beyond one machine").';

CREATE OR REPLACE FUNCTION kb.vector_search(index_id bigint, query_embedding real[],
                                            top_k integer DEFAULT 10, filter jsonb DEFAULT NULL,
                                            ef_search integer DEFAULT NULL)
RETURNS TABLE (chunk_id bigint, similarity double precision)
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT s.chunk_id, s.similarity
  FROM kb._vector_search(kb._index_kb(vector_search.index_id), vector_search.index_id,
                         query_embedding, top_k, filter, ef_search) s
$$;
COMMENT ON FUNCTION kb.vector_search(bigint, real[], integer, jsonb, integer) IS
  'Nearest chunks of an index generation by cosine similarity through its HNSW index, with '
  'iterative scans so a metadata filter still yields top_k rows when they exist; ef_search '
  'NULL: 100 on graphs built with ef_construction 256, 200 on older ones.';

CREATE OR REPLACE FUNCTION kb._vector_channel(p_plan kb.search_plan)
RETURNS TABLE (chunk_id bigint, rank integer, score double precision, z double precision)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF p_plan.method IN ('vector', 'hybrid') AND p_plan.embedding IS NOT NULL THEN
    RETURN QUERY
    SELECT x.chunk_id, row_number() OVER (ORDER BY x.similarity DESC, x.chunk_id)::integer,
           x.similarity,
           coalesce((x.similarity - avg(x.similarity) OVER ())
                    / nullif(stddev_pop(x.similarity) OVER (), 0), 0)
    FROM kb._vector_search(p_plan.kb_id, p_plan.index_id, p_plan.embedding, p_plan.depth,
                           p_plan.filter, (p_plan.config->>'ef_search')::integer) x;
  END IF;
END
$$;
COMMENT ON FUNCTION kb._vector_channel(kb.search_plan) IS
  'Internal: a search''s vector channel: the plan''s depth of nearest chunks (vector and '
  'hybrid, when the query has an embedding).';

CREATE OR REPLACE FUNCTION kb._bm25_channel(p_plan kb.search_plan, p_query text)
RETURNS TABLE (chunk_id bigint, rank integer, score double precision, z double precision)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF p_plan.method IN ('full_text', 'hybrid') THEN
    RETURN QUERY
    SELECT x.chunk_id, row_number() OVER (ORDER BY x.score DESC, x.chunk_id)::integer, x.score,
           coalesce((x.score - avg(x.score) OVER ())
                    / nullif(stddev_pop(x.score) OVER (), 0), 0)
    FROM kb._bm25_search(p_plan.kb_id, p_plan.index_id, p_query, p_plan.depth, p_plan.bm25_k1,
                         (p_plan.config->>'bm25_b')::double precision, p_plan.filter,
                         p_plan.expansion) x;
  END IF;
END
$$;
COMMENT ON FUNCTION kb._bm25_channel(kb.search_plan, text) IS
  'Internal: a search''s BM25 channel (full_text and hybrid), with full_text''s expansion '
  'terms.';
