-- Okapi BM25 over tsvectors, as SQL building blocks and a top-k search.
--
--   score(d, q) = Σ_{t ∈ q} idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))
--   idf(t)      = ln(1 + (N − df + 0.5) / (df + 0.5))
--
-- tf: positions of the lexeme in the chunk's tsvector; dl: all positions of the chunk;
-- positions weighted A (the chunk's heading path, kb.chunk_tsvector) count heading_weight
-- times in both (BM25F with one length normalisation), so the statistics stay exact;
-- N, avgdl, df: over the chunks of the same index generation (kb.kb_index, kb.term_stat),
-- kept exact by the triggers of 150-bm25-statistics.sql. Each distinct query lexeme counts once.
--
-- What every search calls (kb._config_lexemes and the functions it calls) is PL/pgSQL:
-- it keeps its plans for the session, where a SQL function with SET search_path (never
-- inlined) is planned again on each call (1.9 → 1.0 ms a query at 100k, round trip
-- included).

CREATE OR REPLACE FUNCTION kb.bm25_idf(n_chunks double precision, df double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT ln(1 + (n_chunks - df + 0.5) / (df + 0.5)) $$;
COMMENT ON FUNCTION kb.bm25_idf(double precision, double precision) IS
  'BM25 inverse document frequency: ln(1 + (N - df + 0.5) / (df + 0.5)).';

CREATE OR REPLACE FUNCTION kb.bm25_tf(tf double precision, dl double precision,
                                      avgdl double precision, k1 double precision DEFAULT 1.2,
                                      b double precision DEFAULT 0.75)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)) $$;
COMMENT ON FUNCTION kb.bm25_tf(double precision, double precision, double precision, double precision, double precision) IS
  'BM25 term-frequency saturation: tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl)).';

-- The helpers the write path calls for every chunk are PL/pgSQL, which keeps each one's
-- plan for the session: a SQL function that cannot be inlined (a pinned search_path
-- forbids it) is parsed and planned again in every statement that calls it. Measured:
-- kb.chunk_tsvector's own time on 400 small documents 137 -> 15 ms; kb.tsvector_length
-- with kb._heading_weight over 400 statements of 3 chunks 107-141 -> 58 ms.
CREATE OR REPLACE FUNCTION kb.tsvector_length(tsv tsvector, heading_weight integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN (
  SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)
                      + (heading_weight - 1) * coalesce(cardinality(array_positions(u.weights, 'A')), 0)),
                  0)::integer
  FROM unnest(tsv) u);
END
$$;
COMMENT ON FUNCTION kb.tsvector_length(tsvector, integer) IS
  'BM25F document length: the positions of a tsvector, those weighted A (heading text, '
  'kb.chunk_tsvector) counting heading_weight times.';

CREATE OR REPLACE FUNCTION kb.tsvector_length(tsv tsvector) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT kb.tsvector_length(tsv, 1) $$;
COMMENT ON FUNCTION kb.tsvector_length(tsvector) IS
  'BM25 document length: the number of positions in a tsvector.';

CREATE OR REPLACE FUNCTION kb.cjk_bigrams(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN (
  SELECT CASE
      WHEN p_text !~ '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]' THEN p_text
      ELSE (
        SELECT string_agg(
                 CASE WHEN m.r[1] IS NULL
                      THEN regexp_replace(m.r[2], '[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]', ' ', 'g')
                      WHEN length(m.r[1]) = 1 THEN ' ' || m.r[1] || ' '
                      ELSE ' ' || (SELECT string_agg(substr(m.r[1], i, 2), ' ' ORDER BY i)
                                   FROM generate_series(1, length(m.r[1]) - 1) i) || ' '
                 END, '' ORDER BY m.n)
        FROM regexp_matches(p_text,
               '([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+)|([^\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+)',
               'g') WITH ORDINALITY AS m(r, n))
    END);
END
$$;
COMMENT ON FUNCTION kb.cjk_bigrams(text) IS
  'A text with each run of Chinese, Japanese or Korean characters written as its overlapping '
  'character bigrams (缓存策略 -> 缓存 存策 策略; a lone character stays) and CJK punctuation as '
  'spaces, for the text search parsers, which do not segment CJK. Other text is unchanged.';

CREATE OR REPLACE FUNCTION kb.identifier_terms(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN (
  SELECT coalesce(string_agg(t, ' '), '') FROM (
      SELECT replace(m[1], '_', '')
      FROM regexp_matches(p_text, '([A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+)', 'g') m
      UNION ALL
      -- Only names made of words (letters, each part after the first 3+ long): gene and
      -- protein names such as HbA1c, MyD88, H3K4me3 or TatAd are one term, and their
      -- parts (Hb, D88, Ad) would only match unrelated text (SciFact lost 0.003 nDCG@10).
      SELECT regexp_replace(m[1], '([a-z])([A-Z])', '\1 \2', 'g')
      FROM regexp_matches(p_text,
             '(?:^|[^A-Za-z0-9_])([a-z]{2,}(?:[A-Z][a-z]{2,})+|[A-Z][a-z]{2,}(?:[A-Z][a-z]{2,})+)(?![A-Za-z0-9_])',
             'g') m
      UNION ALL
      SELECT replace(m[1], '.', ' ')
      FROM regexp_matches(p_text, '([A-Za-z_][A-Za-z0-9_]+(?:\.[A-Za-z_][A-Za-z0-9_]+)+)', 'g') m
    ) x(t));
END
$$;
COMMENT ON FUNCTION kb.identifier_terms(text) IS
  'Extra words for the identifiers in a text, which the text search parsers split or keep '
  'whole inconsistently: snake_case and CONSTANT_CASE whole (ERR_SOME_CODE -> ERRSOMECODE, '
  'one rare word), camelCase and PascalCase made of words by parts (getUserName -> get User Name; '
  'HbA1c or TatAd stay one term), dotted names by parts (fs.readFile -> fs readFile). DEP0005, E42 and --flags need nothing.';

CREATE OR REPLACE FUNCTION kb.text_tsvector(indexing_config jsonb, body text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN (
  SELECT to_tsvector((indexing_config->>'text_search_config')::regconfig,
                       CASE WHEN coalesce((indexing_config->>'cjk_bigrams')::boolean, false)
                            THEN kb.cjk_bigrams(body) ELSE body END
                       || CASE WHEN coalesce((indexing_config->>'identifier_terms')::boolean, false)
                               THEN E'\n' || kb.identifier_terms(body) ELSE '' END));
END
$$;
COMMENT ON FUNCTION kb.text_tsvector(jsonb, text) IS
  'The tsvector BM25 indexes for a text (chunks) or reads lexemes from (queries), under an '
  'index generation''s indexing_config: its text_search_config, CJK bigrams where it has '
  'cjk_bigrams, identifier words where it has identifier_terms (generations built before '
  'those settings existed have neither, and read queries as they were indexed).';

CREATE OR REPLACE FUNCTION kb._heading_weight(indexing_config jsonb) RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN coalesce((indexing_config->>'heading_weight')::integer, 1);
END
$$;
COMMENT ON FUNCTION kb._heading_weight(jsonb) IS
  'Internal: how many times BM25 counts a heading word under an index generation''s '
  'indexing_config (generations built before heading_weight existed: 1, as body text).';

CREATE OR REPLACE FUNCTION kb.chunk_tsvector(indexing_config jsonb, embed_text text,
                                             heading_path text[])
RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_path text := coalesce(array_to_string(heading_path, ' > '), '');
  v_at   integer;
BEGIN
  -- The chunkers write a chunk's heading path (" > " between headings) ahead of its text,
  -- after the document's title line where there is one: that stretch is weighted A.
  IF v_path <> '' AND kb._heading_weight(indexing_config) > 1 THEN
    v_at := strpos(embed_text, v_path || E'\n\n');
  END IF;
  IF coalesce(v_at, 0) = 0 THEN
    RETURN kb.text_tsvector(indexing_config, embed_text);
  END IF;
  RETURN kb.text_tsvector(indexing_config, left(embed_text, v_at - 1))
         || setweight(kb.text_tsvector(indexing_config, v_path), 'A')
         || kb.text_tsvector(indexing_config, substr(embed_text, v_at + length(v_path)));
END
$$;
COMMENT ON FUNCTION kb.chunk_tsvector(jsonb, text, text[]) IS
  'The tsvector BM25 indexes for a chunk: kb.text_tsvector of the text it was embedded '
  'with, its heading path''s words weighted A where the generation''s heading_weight is '
  'above 1 (kb.tsvector_length and the postings count them heading_weight times).';

CREATE OR REPLACE FUNCTION kb._config_lexemes(indexing_config jsonb, query text)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN (
  SELECT coalesce(array_agg(DISTINCT u.lexeme ORDER BY u.lexeme), '{}')
    FROM unnest(kb.text_tsvector(indexing_config, query)) u);
END
$$;
COMMENT ON FUNCTION kb._config_lexemes(jsonb, text) IS
  'Internal: kb.query_lexemes under an indexing_config already at hand (no lookup of the '
  'generation, so a caller that has read it reads nothing more).';

CREATE OR REPLACE FUNCTION kb.query_lexemes(index_id bigint, query text) RETURNS text[]
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce((SELECT kb._config_lexemes(i.indexing_config, query)
                     FROM kb.kb_index i WHERE i.id = query_lexemes.index_id), '{}')
$$;
COMMENT ON FUNCTION kb.query_lexemes(bigint, text) IS
  'The distinct lexemes of a query under an index generation''s text search configuration.';

CREATE OR REPLACE FUNCTION kb.bm25_score(index_id bigint, tsv tsvector, query text,
                                         k1 double precision DEFAULT 1.2,
                                         b double precision DEFAULT 0.75)
RETURNS double precision
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  WITH ix AS (
    SELECT n_chunks::double precision AS n,
           total_len::double precision / greatest(n_chunks, 1) AS avgdl,
           kb._heading_weight(indexing_config) AS hw
    FROM kb.kb_index WHERE id = bm25_score.index_id
  )
  SELECT coalesce(sum(kb.bm25_idf(ix.n, ts.df)
                      * kb.bm25_tf(coalesce(array_length(u.positions, 1), 1)
                                   + (ix.hw - 1) * coalesce(cardinality(array_positions(u.weights, 'A')), 0),
                                   kb.tsvector_length(bm25_score.tsv, ix.hw), ix.avgdl, k1, b)), 0)
  FROM ix, unnest(bm25_score.tsv) u
  JOIN kb.term_stat ts ON ts.index_id = bm25_score.index_id AND ts.lexeme = u.lexeme
  WHERE u.lexeme = ANY (kb.query_lexemes(bm25_score.index_id, query))
$$;
COMMENT ON FUNCTION kb.bm25_score(bigint, tsvector, text, double precision, double precision) IS
  'BM25 score of one tsvector for a query against an index generation''s corpus statistics.';

CREATE OR REPLACE FUNCTION kb._bm25_cache_mb() RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_raw text := coalesce(nullif(current_setting('kb.bm25_cache_mb', true), ''), '256');
BEGIN
  IF v_raw !~ '^\s*\d{1,7}\s*$' THEN
    RAISE EXCEPTION 'kb.bm25_cache_mb must be a whole number of megabytes (0 to 9999999), not "%"', v_raw
      USING ERRCODE = 'invalid_parameter_value',
            HINT = '0 scores BM25 in SQL only; the default is 256';
  END IF;
  RETURN v_raw::integer;
END
$$;
COMMENT ON FUNCTION kb._bm25_cache_mb() IS
  'Internal: the setting kb.bm25_cache_mb (default 256): how many megabytes of postings a '
  'backend may keep for BM25 scored in memory; 0 scores every query in SQL.';

CREATE OR REPLACE FUNCTION kb._py_bm25_search(kb_id integer, index_id bigint, query text,
    top_k integer, k1 double precision, b double precision, filter jsonb, cache_mb integer,
    terms jsonb, OUT chunk_ids text, OUT scores text, OUT essential text)
LANGUAGE plpython3u STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.bm25_search(plpy, kb_id, index_id, query, top_k, k1, b, filter, cache_mb, terms)
$$;
COMMENT ON FUNCTION kb._py_bm25_search(integer, bigint, text, integer, double precision, double precision, jsonb, integer, jsonb) IS
  'Internal: kb._bm25_search scored in memory (plpython/kbpg_db/bm25.py), each term''s '
  'postings kept per backend while its kb.term_stat row is the same row version: the top '
  'chunk ids and scores, best first, as bigint[] and double precision[] literals, and '
  'kb.bm25_essential''s value. terms: more lexemes and their weights (term expansion).';

CREATE OR REPLACE FUNCTION kb.bm25_cache_stats(OUT terms integer, OUT megabytes double precision,
    OUT hits bigint, OUT misses bigint, OUT budget_mb integer)
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.bm25_cache_stats(plpy)
$$;
COMMENT ON FUNCTION kb.bm25_cache_stats() IS
  'This backend''s BM25 posting cache: terms held, their size, lookups answered from it '
  '(hits) and read from kb.posting (misses, a term new or changed since), and the budget '
  '(setting kb.bm25_cache_mb).';

CREATE OR REPLACE FUNCTION kb._bm25_search(kb_id integer, index_id bigint, query text,
                                           top_k integer, k1 double precision,
                                           b double precision, filter jsonb,
                                           terms jsonb DEFAULT NULL)
RETURNS TABLE (chunk_id bigint, score double precision)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
-- Exact top-k with dynamic pruning (MaxScore). A term's contribution to any chunk is below
-- its upper bound idf·(k1+1) (the tf part saturates below k1+1 whatever tf, dl and avgdl
-- are: safe as documents change, nothing to maintain). Terms in order of that bound, the
-- first e are "essential": the chunks holding one of them are the candidates, scored
-- exactly with every query term (the other terms read through the candidates' own
-- postings). A chunk holding none of them scores at most the other terms' bounds summed;
-- once that is below the k-th best candidate's score (theta), no other chunk can enter the
-- top k and the result equals exhaustive scoring. Otherwise e grows to the first point
-- where the rest's bounds fall below the theta found so far (theta only rises as
-- candidates are added), and at worst every term is essential: exhaustive scoring.
-- terms: lexemes to add to the query's, each with its weight (term expansion: the words
-- nearest the query's embedding, kb._expansion_terms); a term's idf, and so its bound, is
-- multiplied by its weight, the query's own terms' by 1.
DECLARE
  v_n      double precision;
  v_avgdl  double precision;
  v_terms  text[];
  v_own    text[];
  v_every  text[];
  v_cfg    jsonb;
  v_idf    double precision[];
  v_rest   double precision[];  -- v_rest[i]: the bounds of terms i..m summed
  v_df     bigint[];
  v_dfsum  bigint[];            -- v_dfsum[i]: the postings of terms 1..i
  v_m      integer;
  v_e      integer := 1;
  v_ids    bigint[];
  v_scores double precision[];
  v_theta  double precision;
  v_cache_mb integer;
  v_hits   record;
BEGIN
  IF top_k IS NULL OR top_k < 1 THEN
    RETURN;
  END IF;
  -- Scored in memory where the backend may keep postings (kbpg_db/bm25.py): the same
  -- chunks and scores, the postings read once per backend instead of once per query.
  v_cache_mb := kb._bm25_cache_mb();
  IF v_cache_mb > 0 THEN
    SELECT * INTO v_hits
      FROM kb._py_bm25_search(kb_id, index_id, query, top_k, k1, b, filter, v_cache_mb, terms);
    PERFORM set_config('kb.bm25_essential', v_hits.essential, true);
    RETURN QUERY SELECT u.id, u.s
      FROM unnest(v_hits.chunk_ids::bigint[], v_hits.scores::double precision[]) u(id, s);
    RETURN;
  END IF;
  SELECT i.n_chunks, i.total_len::double precision / greatest(i.n_chunks, 1), i.indexing_config
    INTO v_n, v_avgdl, v_cfg
    FROM kb.kb_index i WHERE i.id = _bm25_search.index_id AND i.kb_id = _bm25_search.kb_id;
  -- The query's lexemes and the expansion's, worked out once: in the statement below a
  -- call would run once per term of the generation for a role under row-level security.
  v_own := kb._config_lexemes(v_cfg, query);
  v_every := v_own || ARRAY(SELECT jsonb_object_keys(coalesce(_bm25_search.terms, '{}')));
  SELECT array_agg(t.lexeme ORDER BY t.idf DESC, t.lexeme),
         array_agg(t.idf ORDER BY t.idf DESC, t.lexeme),
         array_agg(t.df ORDER BY t.idf DESC, t.lexeme)
    INTO v_terms, v_idf, v_df
    FROM (SELECT ts.lexeme, ts.df::bigint AS df,
                 ln(1 + (v_n - ts.df + 0.5) / (ts.df + 0.5))
                 * CASE WHEN ts.lexeme = ANY (v_own) THEN 1
                        ELSE (_bm25_search.terms->>ts.lexeme)::double precision END AS idf
            FROM kb.term_stat ts
           WHERE ts.index_id = _bm25_search.index_id AND ts.kb_id = _bm25_search.kb_id
             AND ts.df > 0
             AND ts.lexeme = ANY (v_every)) t;
  v_m := coalesce(cardinality(v_terms), 0);
  IF v_m = 0 THEN
    RETURN;
  END IF;
  SELECT array_agg(coalesce((SELECT sum(x) FROM unnest(v_idf[i:v_m]) x), 0) * (k1 + 1) ORDER BY i),
         array_agg((SELECT sum(x) FROM unnest(v_df[1:least(i, v_m)]) x)::bigint ORDER BY i)
    INTO v_rest, v_dfsum FROM generate_series(1, v_m + 1) i;
  LOOP
    -- Pruning reads the essential terms' postings, then every posting of each candidate
    -- (at most the essential postings, about avgdl each); when that is no less than reading
    -- all the query's postings, score them all at once (e = m: the exhaustive path).
    IF v_e < v_m AND v_dfsum[v_e] * (1 + v_avgdl) >= v_dfsum[v_m] THEN
      v_e := v_m;
    END IF;
    WITH terms AS (
      SELECT t.lexeme, t.idf FROM unnest(v_terms[1:v_e], v_idf[1:v_e]) t(lexeme, idf)
    ), ess AS (   -- the candidates, with what the essential terms give them
      -- Term by term, each term's postings read from the index (OFFSET 0 keeps the
      -- subquery as written). Left to the planner, a KB created since kb.posting was last
      -- analysed (autovacuum seldom analyses a big table for a small KB's rows) looks
      -- empty, and the plan read all its postings for each term: 100 ms instead of 5 on a
      -- 1,700-chunk KB beside large ones.
      SELECT p.chunk_id, sum(t.idf * p.tf * (k1 + 1) / (p.tf + k1 * (1 - b + b * p.dl / v_avgdl))) AS s
      FROM terms t
      CROSS JOIN LATERAL (
        SELECT p.chunk_id, p.tf, p.dl FROM kb.posting p
        WHERE p.index_id = _bm25_search.index_id AND p.lexeme = t.lexeme
          AND p.kb_id = _bm25_search.kb_id
        OFFSET 0) p
      GROUP BY p.chunk_id
    ), rest AS (  -- what the other terms give the candidates, through their own postings
      -- The term's weight is looked up in the arrays, not joined from a list of terms: with
      -- a join clause on the postings the planner cannot use the statistics that say
      -- index_id determines kb_id (migration 015), guesses a term's postings 10x too few,
      -- and filters them all rather than looking up the candidates' own (4x slower).
      SELECT p.chunk_id,
             sum(v_idf[array_position(v_terms, p.lexeme)] * p.tf * (k1 + 1)
                 / (p.tf + k1 * (1 - b + b * p.dl / v_avgdl))) AS s
      FROM kb.posting p
      WHERE v_e < v_m AND p.chunk_id = ANY (ARRAY(SELECT ess.chunk_id FROM ess))
        AND p.index_id = _bm25_search.index_id AND p.kb_id = _bm25_search.kb_id
        AND p.lexeme = ANY (v_terms[v_e + 1:v_m])
      GROUP BY p.chunk_id
    ), top AS (
      SELECT ess.chunk_id, ess.s + coalesce(rest.s, 0) AS score
      FROM ess LEFT JOIN rest USING (chunk_id)
      WHERE filter IS NULL
         OR EXISTS (SELECT 1 FROM kb.chunk c
                     WHERE c.id = ess.chunk_id AND c.kb_id = _bm25_search.kb_id
                       AND c.metadata @> filter)
      ORDER BY 2 DESC, 1
      LIMIT top_k
    )
    SELECT array_agg(top.chunk_id ORDER BY top.score DESC, top.chunk_id),
           array_agg(top.score ORDER BY top.score DESC, top.chunk_id)
      INTO v_ids, v_scores FROM top;
    v_theta := CASE WHEN coalesce(cardinality(v_ids), 0) >= top_k THEN v_scores[top_k] END;
    EXIT WHEN v_e >= v_m OR v_rest[v_e + 1] < v_theta;
    IF v_theta IS NULL THEN  -- fewer than top_k candidates: one more term
      v_e := v_e + 1;
    ELSE  -- the fewest essential terms whose rest is below the theta found so far
      SELECT coalesce(min(i) - 1, v_m) INTO v_e
        FROM generate_series(v_e + 2, v_m + 1) i WHERE v_rest[i] < v_theta;
    END IF;
  END LOOP;
  -- How much was pruned, for explain and the tests: "essential terms/query terms".
  PERFORM set_config('kb.bm25_essential', v_e || '/' || v_m, true);
  RETURN QUERY SELECT u.id, u.s FROM unnest(v_ids, v_scores) u(id, s);
END
$$;
COMMENT ON FUNCTION kb._bm25_search(integer, bigint, text, integer, double precision, double precision, jsonb, jsonb) IS
  'Internal: kb.bm25_search within one knowledge base: every statement reads that kb_id''s '
  'rows only (what Citus routes to the node holding the KB; docs/operations.md, "Beyond one machine").';

CREATE OR REPLACE FUNCTION kb.bm25_search(index_id bigint, query text, top_k integer DEFAULT 10,
                                          k1 double precision DEFAULT 1.2,
                                          b double precision DEFAULT 0.75,
                                          filter jsonb DEFAULT NULL)
RETURNS TABLE (chunk_id bigint, score double precision)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT s.chunk_id, s.score
  FROM kb._bm25_search(kb._index_kb(bm25_search.index_id), bm25_search.index_id, query,
                       top_k, k1, b, filter) s
$$;
COMMENT ON FUNCTION kb.bm25_search(bigint, text, integer, double precision, double precision, jsonb) IS
  'Top chunks of an index generation by Okapi BM25 (exact corpus statistics), optionally '
  'restricted to chunks whose metadata contains filter. The same chunks and scores as '
  'scoring every posting (kb._bm25_exhaustive): scored in memory from postings the backend '
  'keeps (kb.bm25_cache_mb, default 256; pruned exactly above 150k postings), or with '
  'kb.bm25_cache_mb = 0 in SQL with dynamic pruning (MaxScore over idf·(k1+1) term bounds). '
  'Sets kb.bm25_essential (for the transaction) to how many of the query''s terms were '
  'read whole, as "e/m".';

CREATE OR REPLACE FUNCTION kb._bm25_exhaustive(index_id bigint, query text, top_k integer DEFAULT 10,
                                          k1 double precision DEFAULT 1.2,
                                          b double precision DEFAULT 0.75,
                                          filter jsonb DEFAULT NULL)
RETURNS TABLE (chunk_id bigint, score double precision)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- Scores come from the postings alone (an index-only scan of posting_covering_idx);
  -- the formula is written out rather than calling bm25_idf/bm25_tf per posting.
  WITH ix AS (
    SELECT n_chunks::double precision AS n,
           total_len::double precision / greatest(n_chunks, 1) AS avgdl
    FROM kb.kb_index WHERE id = _bm25_exhaustive.index_id
  ), terms AS (
    SELECT ts.lexeme, ln(1 + (ix.n - ts.df + 0.5) / (ts.df + 0.5)) AS idf
    FROM ix, kb.term_stat ts
    WHERE ts.index_id = _bm25_exhaustive.index_id
      AND ts.lexeme = ANY (kb.query_lexemes(_bm25_exhaustive.index_id, query))
  ), scored AS (
    SELECT p.chunk_id,
           sum(t.idf * p.tf * (k1 + 1) / (p.tf + k1 * (1 - b + b * p.dl / ix.avgdl))) AS score
    FROM terms t
    JOIN kb.posting p ON p.index_id = _bm25_exhaustive.index_id AND p.lexeme = t.lexeme
    CROSS JOIN ix
    GROUP BY p.chunk_id
  )
  SELECT s.chunk_id, s.score FROM scored s
  WHERE filter IS NULL
     OR EXISTS (SELECT 1 FROM kb.chunk c WHERE c.id = s.chunk_id AND c.metadata @> filter)
  ORDER BY s.score DESC, s.chunk_id
  LIMIT top_k
$$;
COMMENT ON FUNCTION kb._bm25_exhaustive(bigint, text, integer, double precision, double precision, jsonb) IS
  'Internal: kb.bm25_search without pruning, every posting of every query term scored; '
  'the reference the pruned search is tested and benchmarked against.';
