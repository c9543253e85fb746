-- Okapi BM25 over tsvectors, as SQL building blocks and a top-k search.
--
--   score(d, q) = Σ_{t ∈ q} idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))
--   idf(t)      = ln(1 + (N − df + 0.5) / (df + 0.5))
--
-- tf: positions of the lexeme in the chunk's tsvector; dl: all positions of the chunk;
-- N, avgdl, df: over the chunks of the same index generation (kb.kb_index, kb.term_stat),
-- kept exact by the triggers of 150-bm25-statistics.sql. Each distinct query lexeme counts once.

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

CREATE OR REPLACE FUNCTION kb.tsvector_length(tsv tsvector) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)::integer FROM unnest(tsv) u $$;
COMMENT ON FUNCTION kb.tsvector_length(tsvector) IS
  'BM25 document length: the number of positions in a tsvector.';

CREATE OR REPLACE FUNCTION kb.cjk_bigrams(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
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
  END
$$;
COMMENT ON FUNCTION kb.cjk_bigrams(text) IS
  'A text with each run of Chinese, Japanese or Korean characters written as its overlapping '
  'character bigrams (缓存策略 -> 缓存 存策 策略; a lone character stays) and CJK punctuation as '
  'spaces, for the text search parsers, which do not segment CJK. Other text is unchanged.';

CREATE OR REPLACE FUNCTION kb.identifier_terms(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce(string_agg(t, ' '), '') FROM (
    SELECT replace(m[1], '_', '')
    FROM regexp_matches(p_text, '([A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+)', 'g') m
    UNION ALL
    SELECT regexp_replace(m[1], '([a-z0-9])([A-Z])', '\1 \2', 'g')
    FROM regexp_matches(p_text,
           '(?:^|[^A-Za-z0-9_])([a-z][a-z0-9]+(?:[A-Z][a-z0-9]+)+|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+)(?![A-Za-z0-9_])',
           'g') m
    UNION ALL
    SELECT replace(m[1], '.', ' ')
    FROM regexp_matches(p_text, '([A-Za-z_][A-Za-z0-9_]+(?:\.[A-Za-z_][A-Za-z0-9_]+)+)', 'g') m
  ) x(t)
$$;
COMMENT ON FUNCTION kb.identifier_terms(text) IS
  'Extra words for the identifiers in a text, which the text search parsers split or keep '
  'whole inconsistently: snake_case and CONSTANT_CASE whole (ERR_SOME_CODE -> ERRSOMECODE, '
  'one rare word), camelCase and PascalCase by parts (getUserName -> get User Name), dotted '
  'names by parts (fs.readFile -> fs readFile). DEP0005, E42 and --flags need nothing.';

CREATE OR REPLACE FUNCTION kb.text_tsvector(indexing_config jsonb, body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT to_tsvector((indexing_config->>'text_search_config')::regconfig,
                     CASE WHEN coalesce((indexing_config->>'cjk_bigrams')::boolean, false)
                          THEN kb.cjk_bigrams(body) ELSE body END
                     || CASE WHEN coalesce((indexing_config->>'identifier_terms')::boolean, false)
                             THEN E'\n' || kb.identifier_terms(body) ELSE '' END)
$$;
COMMENT ON FUNCTION kb.text_tsvector(jsonb, text) IS
  'The tsvector BM25 indexes for a text (chunks) or reads lexemes from (queries), under an '
  'index generation''s indexing_config: its text_search_config, CJK bigrams where it has '
  'cjk_bigrams, identifier words where it has identifier_terms (generations built before '
  'those settings existed have neither, and read queries as they were indexed).';

CREATE OR REPLACE FUNCTION kb.query_lexemes(index_id bigint, query text) RETURNS text[]
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce(array_agg(DISTINCT u.lexeme ORDER BY u.lexeme), '{}')
  FROM kb.kb_index i, unnest(kb.text_tsvector(i.indexing_config, query)) u
  WHERE i.id = query_lexemes.index_id
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
           total_len::double precision / greatest(n_chunks, 1) AS avgdl
    FROM kb.kb_index WHERE id = bm25_score.index_id
  )
  SELECT coalesce(sum(kb.bm25_idf(ix.n, ts.df)
                      * kb.bm25_tf(coalesce(array_length(u.positions, 1), 1),
                                   kb.tsvector_length(bm25_score.tsv), ix.avgdl, k1, b)), 0)
  FROM ix, unnest(bm25_score.tsv) u
  JOIN kb.term_stat ts ON ts.index_id = bm25_score.index_id AND ts.lexeme = u.lexeme
  WHERE u.lexeme = ANY (kb.query_lexemes(bm25_score.index_id, query))
$$;
COMMENT ON FUNCTION kb.bm25_score(bigint, tsvector, text, double precision, double precision) IS
  'BM25 score of one tsvector for a query against an index generation''s corpus statistics.';

CREATE OR REPLACE FUNCTION kb.bm25_search(index_id bigint, query text, top_k integer DEFAULT 10,
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
    FROM kb.kb_index WHERE id = bm25_search.index_id
  ), terms AS (
    SELECT ts.lexeme, ln(1 + (ix.n - ts.df + 0.5) / (ts.df + 0.5)) AS idf
    FROM ix, kb.term_stat ts
    WHERE ts.index_id = bm25_search.index_id
      AND ts.lexeme = ANY (kb.query_lexemes(bm25_search.index_id, query))
  ), scored AS (
    SELECT p.chunk_id,
           sum(t.idf * p.tf * (k1 + 1) / (p.tf + k1 * (1 - b + b * p.dl / ix.avgdl))) AS score
    FROM terms t
    JOIN kb.posting p ON p.index_id = bm25_search.index_id AND p.lexeme = t.lexeme
    CROSS JOIN ix
    GROUP BY p.chunk_id
  )
  SELECT s.chunk_id, s.score FROM scored s
  WHERE filter IS NULL
     OR EXISTS (SELECT 1 FROM kb.chunk c WHERE c.id = s.chunk_id AND c.metadata @> filter)
  ORDER BY s.score DESC, s.chunk_id
  LIMIT top_k
$$;
COMMENT ON FUNCTION kb.bm25_search(bigint, text, integer, double precision, double precision, jsonb) IS
  'Top chunks of an index generation by Okapi BM25 (exact corpus statistics), optionally '
  'restricted to chunks whose metadata contains filter.';
