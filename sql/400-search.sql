-- Retrieval: vector (HNSW), full_text (BM25), hybrid (weighted RRF), optional rerank.

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

CREATE OR REPLACE FUNCTION kb._hybrid_display(p_method text, p_zscore boolean,
                                              p_fused double precision, p_top double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT CASE WHEN p_method <> 'hybrid' THEN p_fused
              WHEN p_zscore THEN exp(p_fused - p_top)
              ELSE p_fused / nullif(p_top, 0) END
$$;
COMMENT ON FUNCTION kb._hybrid_display(text, boolean, double precision, double precision) IS
  'Internal: a hybrid result''s score as kb.search shows it, the best 1.0 and the rest in '
  '(0, 1]: RRF divided by the best, a fused z-score as exp(z - best z).';

CREATE OR REPLACE FUNCTION kb.rrf_fuse(ranks integer[], weights double precision[],
                                       k double precision DEFAULT 60)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce(sum(w / (k + r)), 0)
  FROM unnest(ranks, weights) AS u(r, w) WHERE r IS NOT NULL
$$;
COMMENT ON FUNCTION kb.rrf_fuse(integer[], double precision[], double precision) IS
  'Weighted Reciprocal Rank Fusion: Σ weight_i / (k + rank_i) over the lists a result is in.';

DO $$
BEGIN
  IF to_regtype('kb.search_stage') IS NULL THEN
    CREATE TYPE kb.search_stage AS (
      chunk_id bigint, vector_rank integer, vector_score double precision,
      bm25_rank integer, bm25_score double precision, fused_rank integer,
      fused_score double precision, rerank_rank integer, rerank_score double precision
    );
  END IF;
END
$$;

CREATE OR REPLACE FUNCTION kb._check_query(p_query text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF kb._blank(p_query) THEN
    RAISE EXCEPTION 'query must not be empty' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF length(p_query) > 32768 THEN
    RAISE EXCEPTION 'query is % characters; the limit is 32768', length(p_query)
      USING ERRCODE = 'program_limit_exceeded';
  END IF;
END
$$;
COMMENT ON FUNCTION kb._check_query(text) IS
  'Internal: a query every search entry point accepts (not empty, at most 32768 characters).';

CREATE OR REPLACE FUNCTION kb._common_lexemes(indexing_config jsonb, query text)
RETURNS text[]
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- English text search only: the list is of English words.
  SELECT CASE WHEN indexing_config->>'text_search_config' IN ('english', 'pg_catalog.english')
    THEN kb._config_lexemes(indexing_config, (
      SELECT coalesce(string_agg(c.word, ' '), '')
      FROM kb.common_word c
      WHERE c.word = ANY (regexp_split_to_array(lower(query), '[^a-z]+'))))
    ELSE '{}' END
$$;
COMMENT ON FUNCTION kb._common_lexemes(jsonb, text) IS
  'Internal: the lexemes of a query''s common English words (kb.common_word) under an '
  'English indexing_config; none under another language''s.';

CREATE OR REPLACE FUNCTION kb._query_has_exact_cue(p_kb_id integer, p_ix kb.kb_index,
                                                    p_query text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_rare text[];
BEGIN
  -- An identifier (snake_case, dotted.name, call(, camelCase, --flag) or an acronym ...
  IF p_query ~ '\w_\w|\w\.\w|\w\(|[a-z][A-Z]|--\w|\m[A-Z]{2,}\M' THEN
    RETURN true;
  END IF;
  -- ... or a term in few chunks: idf at least 0.8 of the largest possible, about
  -- chunks^0.2 chunks or fewer (5 of 3,000, 10 of 100,000), unless an English KB's term
  -- is a common English word of the query (kb.common_word: "background" is rare in an API
  -- reference, and a paraphrase's word all the same). The words are looked up only for
  -- a query that has a rare term.
  v_rare := ARRAY(
    SELECT ts.lexeme FROM kb.term_stat ts
    WHERE ts.kb_id = p_kb_id AND ts.index_id = p_ix.id AND ts.df > 0
      AND ts.lexeme = ANY (kb._config_lexemes(p_ix.indexing_config, p_query))
      AND ln(1 + (p_ix.n_chunks - ts.df + 0.5) / (ts.df + 0.5))
          >= 0.8 * ln(greatest(p_ix.n_chunks, 2)));
  RETURN cardinality(v_rare) > 0
     AND NOT v_rare <@ kb._common_lexemes(p_ix.indexing_config, p_query);
END
$$;
COMMENT ON FUNCTION kb._query_has_exact_cue(integer, kb.kb_index, text) IS
  'Internal: whether a query names something BM25 matches exactly: an identifier '
  '(snake_case, dotted.name, call(, camelCase, --flag), an acronym, or a term found in few '
  'chunks of the index generation (idf >= 0.8 of ln(chunks)) that is not a common English '
  'word of the query. Hybrid search gives a query without one plain_query_shift more '
  'vector weight.';

CREATE OR REPLACE FUNCTION kb._search_core(
    p_kb_id integer, p_query text, p_overrides jsonb)
RETURNS TABLE (chunk_id bigint, final_rank integer, score double precision,
               vector_rank integer, vector_score double precision,
               bm25_rank integer, bm25_score double precision,
               fused_rank integer, fused_score double precision,
               rerank_rank integer, rerank_score double precision,
               method text, note text, usage jsonb, expanded_from bigint, expansion text,
               graph_rank integer, graph_path text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb     kb.knowledge_base;
  v_ix     kb.kb_index;
  v_prep   kb.prepared_query;
  v_cfg    jsonb;
  v_method text;
  v_top    integer;
  v_depth  integer;
  v_filter jsonb;
  v_w      double precision;
  v_thr    double precision;
  v_rerank boolean;
  v_ncand  integer;
  v_rows   kb.search_stage[];
  v_docs   text[];
  v_scores double precision[];
  v_rerank_usage jsonb;
  v_tree   kb.tree_hit[];
  v_hits   bigint[];
  v_gw     double precision := 0;
  v_gchunk bigint[];
  v_gpath  text[];
  v_zscore boolean;
  v_lim    integer;
  v_xcount integer;  -- full_text's term expansion: how many words
  v_xterms jsonb;
  v_xwords text[];
  v_asked  jsonb;
  v_missing boolean;  -- the generation's words have no vectors (NULL: not asked)
BEGIN
  v_kb := kb._get_kb_by_id(p_kb_id);
  PERFORM kb._check_query(p_query);
  v_ix := kb._active_index(v_kb);
  -- Asked once, and only for a full_text search that expands (the call's term_expansion,
  -- else the KB's, else its model's default; a value that is no number is left to
  -- kb._prepare_query's error): whether its expansion has vectors to read.
  IF coalesce(p_overrides->>'method', v_kb.retrieval_config->>'method') = 'full_text' THEN
    v_asked := CASE WHEN p_overrides ? 'term_expansion' THEN p_overrides->'term_expansion'
                    ELSE v_kb.retrieval_config->'term_expansion' END;
    IF (CASE WHEN v_asked IS NULL OR jsonb_typeof(v_asked) = 'null'
               THEN kb._term_expansion('{}', v_ix.indexing_config) > 0
             WHEN jsonb_typeof(v_asked) = 'number' THEN v_asked::text::numeric > 0
             ELSE false END) THEN
      v_missing := NOT kb._has_term_vectors(p_kb_id, v_ix.id);
    END IF;
  END IF;
  IF p_overrides = '{}' AND v_kb.retrieval_config->>'method' = 'full_text'
     AND v_kb.retrieval_config->>'rerank_model' IS DISTINCT FROM 'llm'
     AND (kb._term_expansion(v_kb.retrieval_config, v_ix.indexing_config) = 0
          OR v_missing) THEN
    -- The stored config was validated when written, and full_text without term expansion
    -- (none asked for, or no vocabulary vectors yet) embeds nothing: this path runs no
    -- PL/Python at all (rerank_model "llm" is resolved to the index generation's chat
    -- model by kb._prepare_query).
    v_prep := ROW(v_kb.retrieval_config, NULL, NULL, NULL)::kb.prepared_query;
  ELSE
    -- Where the words have no vectors yet, full_text does not embed the query for an
    -- expansion that has nothing to read (the note below says so).
    v_prep := kb._prepare_query(v_ix.indexing_config, v_kb.retrieval_config, p_overrides,
                                p_query, NOT coalesce(v_missing, false));
  END IF;
  v_cfg := v_prep.config;
  v_method := v_cfg->>'method';
  v_top := (v_cfg->>'top_k')::integer;
  v_filter := CASE WHEN jsonb_typeof(v_cfg->'filter') = 'object' THEN v_cfg->'filter' END;
  v_w := CASE WHEN v_prep.embedding IS NULL THEN 0  -- provider down: BM25 carries all
              ELSE (v_cfg->>'vector_weight')::double precision END;
  v_thr := (v_cfg->>'similarity_threshold')::double precision;
  v_rerank := (v_cfg->>'rerank')::boolean;
  v_ncand := (v_cfg->>'candidate_count')::integer;
  v_zscore := coalesce(v_cfg->>'fusion', 'rrf') = 'zscore';
  -- A query in plain words leans on the vectors (plain_query_shift).
  IF v_method = 'hybrid' AND v_w > 0 AND v_w < 1
     AND coalesce((v_cfg->>'plain_query_shift')::double precision, 0) > 0
     AND NOT kb._query_has_exact_cue(p_kb_id, v_ix, p_query) THEN
    v_w := least(1, v_w + (v_cfg->>'plain_query_shift')::double precision);
  END IF;
  IF v_method = 'hybrid' THEN
    v_prep.usage := coalesce(v_prep.usage, '{}')
                    || jsonb_build_object('fusion', jsonb_build_object('vector_weight', v_w));
  END IF;
  v_depth := CASE WHEN v_method = 'hybrid' THEN greatest((v_cfg->>'fusion_depth')::integer, v_top)
                  ELSE v_top END;
  IF v_rerank THEN
    v_depth := greatest(v_depth, v_ncand);
  END IF;
  -- The rows fusion hands on: the top_k, or the reranker's candidates.
  v_lim := CASE WHEN v_rerank THEN greatest(v_ncand, v_top) ELSE v_top END;
  -- full_text: the indexed words nearest the query's embedding join BM25's query
  -- (term_expansion), and usage names them; where the words have no vectors yet (the
  -- paths above embed nothing then), the note says so.
  v_xcount := CASE WHEN v_method = 'full_text'
                   THEN kb._term_expansion(v_cfg, v_ix.indexing_config) ELSE 0 END;
  IF v_xcount > 0 THEN
    IF v_prep.embedding IS NOT NULL THEN
      SELECT e.terms, e.words INTO v_xterms, v_xwords
        FROM kb._expansion_terms(p_kb_id, v_ix.id, p_query, v_prep.embedding, v_xcount,
                                 (v_cfg->>'term_expansion_weight')::double precision,
                                 v_ix.indexing_config) e;
    END IF;
    IF v_xwords IS NOT NULL THEN
      v_prep.usage := coalesce(v_prep.usage, '{}')
                      || jsonb_build_object('term_expansion', jsonb_build_object('words', v_xwords));
    ELSIF coalesce(v_missing, NOT kb._has_term_vectors(p_kb_id, v_ix.id)) THEN
      v_prep.note := concat_ws('; ', v_prep.note,
        'term expansion: this knowledge base''s words have no vectors yet '
        '(the worker embeds them when its queue is empty; kb.refresh_term_vectors(kb) at once)');
    END IF;
  END IF;

  IF v_method = 'tree_search' THEN
    -- PageIndex: the LLM reads the trees' ToCs (kbpg_db/features/page_index/tree_search.py); ranks as it chose.
    v_tree := ARRAY(SELECT t FROM kb._tree_search(p_kb_id, v_ix.id, p_query, v_cfg,
                                                  v_ix.indexing_config) t);
    v_prep.note := v_tree[1].note;
    v_prep.usage := coalesce(v_prep.usage, '{}') || jsonb_build_object('llm', v_tree[1].usage);
    v_rows := ARRAY(
      SELECT ROW(t.chunk_id, NULL, NULL, NULL, NULL, t.rank, 1.0 / t.rank, NULL, NULL)::kb.search_stage
      FROM unnest(v_tree) t WHERE t.chunk_id IS NOT NULL ORDER BY t.rank);
  ELSE
    -- The knowledge graph's channel (hybrid, on KBs that have one): the chunks holding
    -- the vertices the query names and their neighbours, fused as a third list.
    IF v_method = 'hybrid' AND (v_ix.indexing_config->'knowledge_graph'->>'enabled')::boolean
       AND (v_cfg->>'graph_weight')::double precision > 0 THEN
      v_gw := (v_cfg->>'graph_weight')::double precision;
      SELECT array_agg(g.chunk_id ORDER BY g.rank), array_agg(g.path ORDER BY g.rank)
        INTO v_gchunk, v_gpath
        FROM kb._graph_channel(p_kb_id, v_ix.id, p_query, (v_cfg->>'graph_limit')::integer,
                               (v_cfg->>'graph_hops')::integer, v_filter, v_prep.embedding) g;
    END IF;
    v_rows := ARRAY(
      -- z: a candidate's score as standard deviations above its list's mean, for
      -- fusion zscore (a list whose scores are all equal gives 0).
      WITH v AS (
        SELECT x.chunk_id, x.similarity,
               row_number() OVER (ORDER BY x.similarity DESC, x.chunk_id)::integer AS rn,
               coalesce((x.similarity - avg(x.similarity) OVER ())
                        / nullif(stddev_pop(x.similarity) OVER (), 0), 0) AS z
        FROM kb._vector_search(p_kb_id, v_ix.id, v_prep.embedding, v_depth, v_filter,
                               (v_cfg->>'ef_search')::integer) x
        WHERE v_method IN ('vector', 'hybrid') AND v_prep.embedding IS NOT NULL
      ), t AS (
        SELECT x.chunk_id, x.score,
               row_number() OVER (ORDER BY x.score DESC, x.chunk_id)::integer AS rn,
               coalesce((x.score - avg(x.score) OVER ())
                        / nullif(stddev_pop(x.score) OVER (), 0), 0) AS z
        FROM kb._bm25_search(p_kb_id, v_ix.id, p_query, v_depth,
                             -- bm25_k1 unset: by method (config.BM25_K1*)
                             coalesce((v_cfg->>'bm25_k1')::double precision,
                                      CASE WHEN v_method = 'full_text'
                                           THEN /*@bm25_k1_full_text*/1.5/*@*/
                                           ELSE /*@bm25_k1*/1.2/*@*/ END),
                             (v_cfg->>'bm25_b')::double precision, v_filter, v_xterms) x
        WHERE v_method IN ('full_text', 'hybrid')
      ), gr0 AS (
        SELECT u.chunk_id, u.rn::integer AS rn FROM unnest(v_gchunk) WITH ORDINALITY AS u(chunk_id, rn)
      ), gr AS (  -- the graph channel has ranks only: 1/rank stands for its score
        SELECT g.chunk_id, g.rn,
               coalesce((1.0 / g.rn - avg(1.0 / g.rn) OVER ())
                        / nullif(stddev_pop(1.0 / g.rn) OVER (), 0), 0)::double precision AS z
        FROM gr0 g
      ), f AS (
        SELECT coalesce(v.chunk_id, t.chunk_id, gr.chunk_id) AS chunk_id, v.rn AS vrank,
               v.similarity AS vscore, t.rn AS trank, t.score AS tscore,
               CASE v_method
                 WHEN 'vector' THEN v.similarity
                 WHEN 'full_text' THEN t.score
                 ELSE CASE WHEN v_zscore
                   -- A candidate missing from a list counts as one standard deviation
                   -- below that list's lowest (so a lone BM25 hit, z 0, still counts).
                   THEN v_w * coalesce(v.z, (SELECT min(z) - 1 FROM v), 0)
                        + (1 - v_w) * coalesce(t.z, (SELECT min(z) - 1 FROM t), 0)
                        + v_gw * coalesce(gr.z, (SELECT min(z) - 1 FROM gr), 0)
                   ELSE kb.rrf_fuse(ARRAY[v.rn, t.rn, gr.rn], ARRAY[v_w, 1 - v_w, v_gw],
                                    (v_cfg->>'rrf_k')::double precision) END
               END AS fused
        FROM v FULL JOIN t ON t.chunk_id = v.chunk_id
        FULL JOIN gr ON gr.chunk_id = coalesce(v.chunk_id, t.chunk_id)
      ), miss AS (
        -- BM25-only candidates still get their cosine similarity (for thresholds, explain):
        -- one primary-key scan for all of them. (A join here was planned as a hash join that
        -- read every row of kb.embedding, every KB's vectors; a probe per candidate ran the
        -- row-level security lookup per candidate.) Without a threshold only the rows
        -- returned need it: the best v_lim of them hold every one that is returned (0.6 ms
        -- of a 100-candidate hybrid query, A/B).
        SELECT e.chunk_id, 1 - (e.embedding <=> v_prep.embedding::vector) AS similarity
        FROM kb.embedding e
        WHERE v_prep.embedding IS NOT NULL AND e.kb_id = p_kb_id
          AND e.chunk_id = ANY (ARRAY(SELECT f.chunk_id FROM f WHERE f.vscore IS NULL
                                      ORDER BY f.fused DESC, f.chunk_id
                                      LIMIT CASE WHEN v_thr IS NULL THEN v_lim END))
      ), g AS (
        SELECT f.chunk_id, f.vrank, coalesce(f.vscore, m.similarity) AS vscore,
               f.trank, f.tscore, f.fused
        FROM f LEFT JOIN miss m ON m.chunk_id = f.chunk_id
      )
      SELECT ROW(g.chunk_id, g.vrank, g.vscore, g.trank, g.tscore,
                 row_number() OVER (ORDER BY g.fused DESC, g.chunk_id), g.fused,
                 NULL, NULL)::kb.search_stage
      FROM g
      WHERE v_thr IS NULL OR v_prep.embedding IS NULL OR g.vscore >= v_thr
      ORDER BY g.fused DESC, g.chunk_id
      LIMIT v_lim);
  END IF;

  IF v_rerank AND cardinality(v_rows) > 0 THEN
    v_rows := v_rows[1:v_ncand];
    v_docs := ARRAY(SELECT c.content FROM unnest(v_rows) WITH ORDINALITY AS r
                      JOIN kb.chunk c ON c.id = r.chunk_id AND c.kb_id = p_kb_id
                    ORDER BY r.ordinality);
    SELECT r.scores, r.usage INTO v_scores, v_rerank_usage
    FROM kb._rerank(v_cfg, p_query, v_docs) r;
    -- An LLM ranking adds its calls, tokens and cost (rerank.llm).
    v_prep.usage := coalesce(v_prep.usage, '{}') || jsonb_build_object('rerank',
      jsonb_build_object('model', v_cfg->>'rerank_model', 'documents', cardinality(v_docs))
      || coalesce(v_rerank_usage, '{}'));
    v_rows := ARRAY(
      SELECT ROW(r.chunk_id, r.vector_rank, r.vector_score, r.bm25_rank, r.bm25_score,
                 r.fused_rank, r.fused_score,
                 row_number() OVER (ORDER BY u.s DESC, r.fused_rank), u.s)::kb.search_stage
      FROM unnest(v_rows) WITH ORDINALITY r JOIN unnest(v_scores) WITH ORDINALITY u(s, i)
        ON u.i = r.ordinality
      WHERE u.s >= coalesce((v_cfg->>'rerank_threshold')::double precision, '-Infinity')
      ORDER BY u.s DESC, r.fused_rank);
  END IF;

  RETURN QUERY
  WITH r AS (
    SELECT x.*, row_number() OVER (ORDER BY coalesce(x.rerank_rank, x.fused_rank))::integer AS fr,
           max(x.fused_score) OVER () AS top_fused
    FROM unnest(v_rows) x
  )
  SELECT r.chunk_id, r.fr,
         CASE WHEN r.rerank_score IS NOT NULL THEN r.rerank_score
              ELSE kb._hybrid_display(v_method, v_zscore, r.fused_score, r.top_fused) END,
         r.vector_rank, r.vector_score, r.bm25_rank, r.bm25_score, r.fused_rank,
         kb._hybrid_display(v_method, v_zscore, r.fused_score, r.top_fused),
         r.rerank_rank, r.rerank_score, v_method, v_prep.note, coalesce(v_prep.usage, '{}'),
         NULL::bigint, NULL::text, array_position(v_gchunk, r.chunk_id),
         v_gpath[array_position(v_gchunk, r.chunk_id)]
  FROM r WHERE r.fr <= v_top ORDER BY r.fr;

  -- GraphIndex: the sections the hits reference (first degree), after the hits, in the
  -- order of the hit that refers to them; each names that hit and the reference.
  IF v_ix.indexing_config->>'strategy' = 'graph_index' AND cardinality(v_rows) > 0
     AND (v_cfg->>'reference_expansion')::boolean AND (v_cfg->>'expansion_limit')::integer > 0 THEN
    -- The hits returned above, in their order.
    v_hits := ARRAY(SELECT x.chunk_id FROM unnest(v_rows) x
                    ORDER BY coalesce(x.rerank_rank, x.fused_rank) LIMIT v_top);
    RETURN QUERY
    WITH cand AS (
      SELECT e.target_chunk_id, h.chunk_id AS via, h.fr, e.ordinal, e.kind, e.phrase,
             row_number() OVER (PARTITION BY e.target_chunk_id ORDER BY h.fr, e.ordinal) AS k
      FROM unnest(v_hits) WITH ORDINALITY AS h(chunk_id, fr)
      JOIN kb.graph_index_reference e ON e.source_chunk_id = h.chunk_id AND e.kb_id = p_kb_id
      WHERE e.target_chunk_id <> ALL (v_hits)
    )
    SELECT c.target_chunk_id,
           (cardinality(v_hits) + row_number() OVER (ORDER BY c.fr, c.ordinal))::integer,
           NULL::double precision, NULL::integer, NULL::double precision, NULL::integer,
           NULL::double precision, NULL::integer, NULL::double precision, NULL::integer,
           NULL::double precision, v_method, v_prep.note, coalesce(v_prep.usage, '{}'), c.via,
           c.kind || ': ' || c.phrase, NULL::integer, NULL::text
    FROM cand c WHERE c.k = 1
    ORDER BY c.fr, c.ordinal
    LIMIT (v_cfg->>'expansion_limit')::integer;
  END IF;
END
$$;
COMMENT ON FUNCTION kb._search_core(integer, text, jsonb) IS
  'Internal: every stage of a search (vector, BM25, fusion, rerank) of one knowledge base, '
  'by kb_id, for kb.search, kb.explain_search and kb.build_context. Every statement reads '
  'that kb_id''s rows only (docs/operations.md, "Beyond one machine").';

CREATE OR REPLACE FUNCTION kb._overrides(named jsonb, options jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF options IS NOT NULL AND jsonb_typeof(options) <> 'object' THEN
    RAISE EXCEPTION 'options must be a JSON object of retrieval_config fields'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF named->'filter' IS NOT NULL AND jsonb_typeof(named->'filter') NOT IN ('object', 'null') THEN
    RAISE EXCEPTION 'filter must be a JSON object (metadata it must contain), not a %', jsonb_typeof(named->'filter')
      USING ERRCODE = 'invalid_parameter_value', HINT = 'e.g. {"category": "billing"}';
  END IF;
  RETURN coalesce(options, '{}') || jsonb_strip_nulls(named);
END
$$;
COMMENT ON FUNCTION kb._overrides(jsonb, jsonb) IS
  'Internal: a call''s named retrieval options (NULL = not given) over its options object.';

CREATE OR REPLACE FUNCTION kb._search_rows(p_kb_id integer, p_query text, p_overrides jsonb)
RETURNS TABLE (final_rank integer, chunk_id bigint, score double precision,
               vector_rank integer, vector_score double precision,
               bm25_rank integer, bm25_score double precision,
               fused_rank integer, fused_score double precision,
               rerank_rank integer, rerank_score double precision, method text, note text,
               usage jsonb, document_id bigint, title text, content text,
               heading_path text[], page integer, metadata jsonb, source_uri text,
               char_start integer, char_end integer, expanded_from bigint, expansion text,
               graph_rank integer, graph_path text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
-- PL/pgSQL keeps this plan for the session; as a SQL function (SET search_path: never
-- inlined) it was planned on every search (about 1 ms).
BEGIN
  RETURN QUERY
  SELECT CASE WHEN s.chunk_id IS NULL THEN s.final_rank
              ELSE (row_number() OVER (PARTITION BY s.chunk_id IS NULL ORDER BY s.final_rank))::integer
         END,
         s.chunk_id, s.score, s.vector_rank, s.vector_score, s.bm25_rank,
         s.bm25_score, s.fused_rank, s.fused_score, s.rerank_rank, s.rerank_score, s.method,
         s.note, s.usage, d.id, d.title, c.content, c.heading_path, c.page,
         -- A chunk of a PDF or an image: where it sits on its pages (regions, ocr).
         CASE WHEN c.origin IS NULL THEN d.metadata ELSE d.metadata || c.origin END, d.source_uri,
         c.char_start, c.char_end, s.expanded_from, s.expansion, s.graph_rank, s.graph_path
  FROM kb._search_core(p_kb_id, p_query, p_overrides) s
  -- LEFT JOINs: an inner join over an empty KB could be planned to skip the search itself,
  -- and with it the validation of the options.
  LEFT JOIN kb.chunk c ON c.id = s.chunk_id AND c.kb_id = p_kb_id
  LEFT JOIN kb.document d ON d.id = c.document_id AND d.kb_id = p_kb_id
  -- The stages read with snapshots of their own (a document indexed, or a standby's
  -- replay, while the search runs): a chunk committed after this statement began is left
  -- out, not returned without its text, and the ranks close up.
  WHERE s.chunk_id IS NULL OR c.id IS NOT NULL
  ORDER BY s.final_rank;
END
$$;
COMMENT ON FUNCTION kb._search_rows(integer, text, jsonb) IS
  'Internal: kb._search_core''s ranked stages with each chunk''s text and document, the one '
  'search path kb.search and kb.explain_search read.';

-- The named parameters of kb.search and kb.explain_search are generated from
-- kbpg_db.config.RetrievalConfig by kbpg migrate (the /*@...*/ markers; kbpg_db/sqlgen.py):
-- every retrieval_config field is a parameter, in the model's order.
CREATE OR REPLACE FUNCTION kb.search(
    kb text,
    query text,
    /*@retrieval_params*/options jsonb DEFAULT NULL
) RETURNS TABLE (rank integer, chunk_id bigint, document_id bigint, title text, content text,
                 score double precision, heading_path text[], page integer, metadata jsonb,
                 source_uri text, char_start integer, char_end integer,
                 vector_score double precision, bm25_score double precision,
                 rerank_score double precision, note text, usage jsonb,
                 expanded_from bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
-- PL/pgSQL keeps the plan for the session (a SQL function with SET is planned each call).
BEGIN
  RETURN QUERY
    SELECT r.final_rank, r.chunk_id, r.document_id, r.title, r.content, r.score, r.heading_path,
           r.page, r.metadata, r.source_uri, r.char_start, r.char_end, r.vector_score,
           r.bm25_score, r.rerank_score, r.note, r.usage, r.expanded_from
    FROM kb._search_rows((kb._get_kb(kb)).id, query,
           kb._overrides(jsonb_build_object(/*@retrieval_object*/), options)) r;
END
$$;
COMMENT ON FUNCTION kb.search IS
  'Searches a knowledge base. method: hybrid (default; the vector and BM25 lists fused, by '
  'standardised scores or RRF (fusion), weighted by vector_weight, plus plain_query_shift for '
  'a query in plain words; score normalised so the best is 1), vector (score = cosine '
  'similarity) or full_text (score = BM25). BM25''s k1, unless bm25_k1 sets it, is '
  '/*@bm25_k1_full_text*/1.5/*@*/ for full_text and /*@bm25_k1*/1.2/*@*/ in hybrid''s BM25 list. '
  'full_text adds to BM25''s query the term_expansion indexed words nearest the query''s '
  'embedding, at most term_expansion_weight of a word''s weight (0 words: plain BM25; unset: '
  '/*@term_expansion*/16/*@*/ where the KB embeds with a local model, 0 with a provider''s). '
  'Every retrieval_config field can be overridden by a named parameter or in options; filter '
  'keeps chunks whose document metadata contains it. note says when a channel was unavailable; '
  'usage what the query cost and used (its embedding, rerank, LLM calls; the vector weight '
  'hybrid fused with; the words term expansion added). On a graph_index KB the '
  'sections the hits reference follow the hits (reference_expansion, at most expansion_limit), '
  'with score NULL and expanded_from the chunk_id of the hit that refers to them. Writes nothing.';

CREATE OR REPLACE FUNCTION kb.explain_search(
    kb text,
    query text,
    /*@retrieval_params*/options jsonb DEFAULT NULL
) RETURNS TABLE (final_rank integer, chunk_id bigint, title text, score double precision,
                 vector_rank integer, vector_score double precision,
                 bm25_rank integer, bm25_score double precision,
                 fused_rank integer, fused_score double precision,
                 rerank_rank integer, rerank_score double precision, method text, note text,
                 usage jsonb, expanded_from bigint, expansion text, graph_rank integer,
                 graph_path text)
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT r.final_rank, r.chunk_id, r.title, r.score, r.vector_rank, r.vector_score,
         r.bm25_rank, r.bm25_score, r.fused_rank, r.fused_score, r.rerank_rank, r.rerank_score,
         r.method, r.note, r.usage, r.expanded_from, r.expansion, r.graph_rank, r.graph_path
  FROM kb._search_rows((kb._get_kb(kb)).id, query,
         kb._overrides(jsonb_build_object(/*@retrieval_object*/), options)) r
$$;
COMMENT ON FUNCTION kb.explain_search IS
  'Like kb.search, with each result''s rank and score in every stage: vector, BM25, fusion '
  '(normalised), rerank. NULL where a stage did not see the chunk. A GraphIndex section added '
  'by expansion names the hit (expanded_from) and the reference (expansion: kind: phrase). On '
  'a KB with a knowledge graph, graph_rank is the chunk''s rank in the graph channel and '
  'graph_path how the graph reached it (names X, or X -defines-> Y).';
