-- Term expansion for full_text search (retrieval_config.term_expansion; the vocabulary's
-- embeddings are built by plpython/kbpg_db/term_expansion.py).
--
-- A full_text search with term_expansion > 0 (by default where the KB embeds with a
-- local model) embeds the query and adds the KB's indexed words nearest to it to BM25's
-- query: the nearest at term_expansion_weight of a query word's weight, the others in
-- proportion to their similarity, a word rarer than the query's own scaled down. A
-- generation whose vocabulary has no vectors yet (the worker embeds it when its queue is
-- empty; kb.refresh_term_vectors(kb) at once) is searched without expansion, and the
-- search's note says so.

CREATE OR REPLACE FUNCTION kb._term_expansion(p_retrieval_config jsonb,
                                              p_indexing_config jsonb)
RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- Unset: on where the KB embeds with a local model, off with a provider's (each
  -- full_text query would call it); kbpg_db.config.term_expansion_default in Python.
  SELECT coalesce((p_retrieval_config->>'term_expansion')::integer,
                  CASE WHEN starts_with(p_indexing_config->>'embedding_model',
                                        '/*@local_prefix*/local//*@*/')
                       THEN /*@term_expansion*/16/*@*/ ELSE 0 END)
$$;
COMMENT ON FUNCTION kb._term_expansion(jsonb, jsonb) IS
  'Internal: how many words full_text''s term expansion adds for a KB''s stored configs: '
  'its term_expansion, or where unset the default with a local embedding model and 0 with '
  'a provider''s.';

CREATE OR REPLACE FUNCTION kb._py_refresh_term_vectors(kb_id integer, index_id bigint,
    indexing_config jsonb, OUT added integer, OUT removed integer)
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.refresh_term_vectors(plpy, kb_id, index_id, indexing_config)
$$;
COMMENT ON FUNCTION kb._py_refresh_term_vectors(integer, bigint, jsonb) IS
  'Internal: embeds the words of one generation that have no vector yet '
  '(kbpg_db/term_expansion.py).';

CREATE OR REPLACE FUNCTION kb.refresh_term_vectors(kb text DEFAULT NULL)
RETURNS TABLE (kb_name text, index_id bigint, added integer, removed integer, error text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix      record;
  v_seen    text;
  v_added   integer;
  v_removed integer;
  v_error   text;
BEGIN
  IF refresh_term_vectors.kb IS NOT NULL THEN
    PERFORM kb._get_kb(refresh_term_vectors.kb);  -- no such KB: an error that names it
  END IF;
  -- The generations (building or serving) whose chunks changed since their last refresh
  -- (chunk count and total length): of the KB named, or of every KB that expands full_text
  -- queries (kb._term_expansion above 0).
  FOR v_ix IN
    SELECT k.name, i.id, i.kb_id, i.n_chunks, i.total_len, i.indexing_config
      FROM kb.knowledge_base k
      JOIN kb.kb_index i ON i.kb_id = k.id AND i.status IN ('building', 'active')
      LEFT JOIN kb.term_vector_state s ON s.index_id = i.id AND s.kb_id = i.kb_id
     WHERE (refresh_term_vectors.kb IS NULL
            AND kb._term_expansion(k.retrieval_config, i.indexing_config) > 0
            OR k.name = refresh_term_vectors.kb)
       AND i.n_chunks > 0
       AND s.seen IS DISTINCT FROM i.n_chunks || '/' || i.total_len
     ORDER BY i.id LOOP
    -- The KB's row, then the generation's, as kb.drop_knowledge_base and a reindex lock
    -- them, or none: where either is locked for a drop or a reindex, this refresh steps
    -- back (the generation is tried again on a later call). Taken the other way round,
    -- a drop that deleted the generation and waits for this refresh's table lock (its
    -- HNSW index's DROP INDEX) and this refresh's write that waits for the deleted row
    -- would each wait for the other: a deadlock.
    PERFORM 1 FROM kb.knowledge_base k WHERE k.id = v_ix.kb_id FOR KEY SHARE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    PERFORM 1 FROM kb.kb_index i WHERE i.kb_id = v_ix.kb_id AND i.id = v_ix.id
       FOR KEY SHARE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    v_seen := v_ix.n_chunks || '/' || v_ix.total_len;
    v_error := NULL;
    BEGIN
      SELECT r.added, r.removed INTO v_added, v_removed
        FROM kb._py_refresh_term_vectors(v_ix.kb_id, v_ix.id, v_ix.indexing_config) r;
    EXCEPTION WHEN OTHERS THEN
      -- Recorded, and tried again once the generation's chunks change.
      v_added := NULL;
      v_removed := NULL;
      v_error := SQLERRM;
    END;
    INSERT INTO kb.term_vector_state AS s (index_id, kb_id, seen, refreshed_at, error)
    VALUES (v_ix.id, v_ix.kb_id, v_seen, now(), left(v_error, 2000))
    ON CONFLICT ON CONSTRAINT term_vector_state_pkey DO UPDATE
      SET seen = EXCLUDED.seen, refreshed_at = now(), error = EXCLUDED.error;
    RETURN QUERY SELECT v_ix.name, v_ix.id, v_added, v_removed, v_error;
  END LOOP;
END
$$;
COMMENT ON FUNCTION kb.refresh_term_vectors(text) IS
  'Embeds the new words of the generations whose chunks changed since their last refresh, for '
  'full_text''s term expansion: of the KB named, or of every KB that expands (term_expansion '
  'above 0, or unset with a local embedding model; the worker runs it so when its queue is '
  'empty). Returns what each refresh added and '
  'removed, or its error (also kept in kb.term_vector_state).';

CREATE OR REPLACE FUNCTION kb._has_term_vectors(p_kb_id integer, p_index_id bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_has boolean;
BEGIN
  IF p_kb_id IS NULL OR p_index_id IS NULL THEN
    RETURN false;
  END IF;
  -- Planned for these ids: a plan for any generation reads the whole table where the
  -- generation has no words (EXISTS expects an early first row).
  EXECUTE format('SELECT EXISTS (SELECT 1 FROM kb.term_vector v WHERE v.index_id = %s '
                 'AND v.kb_id = %s AND v.embedding IS NOT NULL)', p_index_id, p_kb_id)
    INTO v_has;
  RETURN v_has;
END
$$;
COMMENT ON FUNCTION kb._has_term_vectors(integer, bigint) IS
  'Internal: whether a generation''s words have vectors (term expansion can run).';

CREATE OR REPLACE FUNCTION kb._expansion_terms(p_kb_id integer, p_index_id bigint, p_query text,
    p_embedding real[], p_count integer, p_weight double precision, p_indexing_config jsonb,
    OUT terms jsonb, OUT words text[])
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
-- The p_count indexed words nearest the query's embedding that are not among the query's
-- own lexemes, as {lexeme: weight}, and the words, nearest first. The nearest weighs
-- p_weight, each other p_weight times its similarity over the nearest's; and a word rarer
-- than the query's own words are on average weighs less, by that mean idf over its own,
-- so that its BM25 idf counts no more than the query's mean word does: an added word in
-- a handful of chunks ("createindex") would otherwise outweigh what the query names. The
-- words come from the generation's HNSW index on kb.term_vector (term_vector_hnsw_<id>).
DECLARE
  v_own  text[];
  v_n    double precision;
  v_dim  integer;
  v_typ  text;
  v_cap  double precision;
  v_old_ef text := current_setting('hnsw.ef_search', true);
BEGIN
  IF p_embedding IS NULL OR p_count IS NULL OR p_count < 1 OR p_weight IS NULL OR p_weight <= 0 THEN
    RETURN;
  END IF;
  SELECT i.n_chunks, i.embedding_dim INTO v_n, v_dim
    FROM kb.kb_index i WHERE i.id = p_index_id AND i.kb_id = p_kb_id;
  IF NOT FOUND OR cardinality(p_embedding) <> v_dim THEN
    RETURN;
  END IF;
  v_own := kb._config_lexemes(p_indexing_config, p_query);
  SELECT avg(kb.bm25_idf(v_n, ts.df)) INTO v_cap
    FROM kb.term_stat ts
   WHERE ts.index_id = p_index_id AND ts.kb_id = p_kb_id AND ts.df > 0
     AND ts.lexeme = ANY (v_own);
  v_typ := kb._vector_type(v_dim);
  -- The nearest p_count + (the query's lexemes) words hold p_count that are not its own.
  PERFORM set_config('hnsw.ef_search', greatest(100, p_count + cardinality(v_own))::text, true);
  EXECUTE format($q$
    WITH near AS MATERIALIZED (
      SELECT v.lexeme, v.word, v.embedding::%1$s(%2$s) <=> $1::%1$s(%2$s) AS dist
        FROM kb.term_vector v
       WHERE v.index_id = %3$s AND v.kb_id = %4$s AND v.embedding IS NOT NULL
       ORDER BY v.embedding::%1$s(%2$s) <=> $1::%1$s(%2$s)
       LIMIT $2
    ), kept AS (
      SELECT n.lexeme, n.word, 1 - n.dist AS sim, kb.bm25_idf($5, ts.df) AS idf
        FROM near n
        JOIN kb.term_stat ts ON ts.index_id = %3$s AND ts.kb_id = %4$s AND ts.lexeme = n.lexeme
       WHERE ts.df > 0 AND n.lexeme <> ALL ($3)
       ORDER BY n.dist, n.lexeme
       LIMIT $4
    ), weighted AS (
      SELECT k.lexeme, k.word, k.sim,
             $6 * k.sim / nullif(max(k.sim) OVER (), 0)
                * CASE WHEN $7 IS NULL OR k.idf <= $7 THEN 1 ELSE $7 / k.idf END AS w
        FROM kept k
    )
    SELECT jsonb_object_agg(x.lexeme, x.w), array_agg(x.word ORDER BY x.sim DESC, x.lexeme)
      FROM weighted x WHERE x.w > 0$q$,
    v_typ, v_dim, p_index_id, p_kb_id)
  INTO terms, words
  USING p_embedding::vector, p_count + cardinality(v_own), v_own, p_count, v_n, p_weight, v_cap;
  PERFORM set_config('hnsw.ef_search', coalesce(v_old_ef, '40'), true);
END
$$;
COMMENT ON FUNCTION kb._expansion_terms(integer, bigint, text, real[], integer, double precision, jsonb) IS
  'Internal: full_text''s term expansion, the indexed words nearest the query''s embedding: '
  'their lexemes and weights ({lexeme: weight}; a word rarer than the query''s words are on '
  'average weighs less) and the words, nearest first.';
