-- Search: kb.search and kb.explain_search, through kb._search_rows and kb._search_core,
-- which runs the stages: the plan (sql/400), a strategy's own search or the channels
-- fused (sql/410, 420), rerank (sql/430), and a strategy's step after search. A strategy
-- names its own steps (kbpg_db.features: own_search, after_search); kbpg migrate writes
-- the dispatch below from that list (the /*@...*/ markers).

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
  v_plan   kb.search_plan;
  v_rows   kb.search_stage[];
  v_stage  record;
  v_own    boolean := true;
  v_gchunk bigint[];
  v_gpath  text[];
BEGIN
  v_plan := kb._search_plan(p_kb_id, p_query, p_overrides);
  -- A strategy with a search of its own ranks the candidates itself (kb._search_<name>:
  -- its rows and the plan with its note and usage); the others fuse the channels.
  CASE v_plan.strategy
    /*@own_search_arms*/WHEN 'page_index' THEN v_stage := kb._search_page_index(v_plan, p_query);/*@*/
    ELSE v_own := false;
  END CASE;
  IF v_own THEN
    v_rows := v_stage.rows;
    v_plan := v_stage.plan;
  ELSE
    v_stage := kb._fuse(v_plan, p_query);
    v_rows := v_stage.rows;
    v_gchunk := v_stage.graph_chunks;
    v_gpath := v_stage.graph_paths;
  END IF;

  IF v_plan.rerank AND cardinality(v_rows) > 0 THEN
    v_stage := kb._rerank_stage(v_plan, p_query, v_rows);
    v_rows := v_stage.rows;
    v_plan.usage := coalesce(v_plan.usage, '{}') || v_stage.usage;
  END IF;

  RETURN QUERY
  WITH r AS (
    SELECT x.*, row_number() OVER (ORDER BY coalesce(x.rerank_rank, x.fused_rank))::integer AS fr,
           max(x.fused_score) OVER () AS top_fused
    FROM unnest(v_rows) x
  )
  SELECT r.chunk_id, r.fr,
         CASE WHEN r.rerank_score IS NOT NULL THEN r.rerank_score
              ELSE kb._hybrid_display(v_plan.method, v_plan.zscore, r.fused_score, r.top_fused) END,
         r.vector_rank, r.vector_score, r.bm25_rank, r.bm25_score, r.fused_rank,
         kb._hybrid_display(v_plan.method, v_plan.zscore, r.fused_score, r.top_fused),
         r.rerank_rank, r.rerank_score, v_plan.method, v_plan.note, coalesce(v_plan.usage, '{}'),
         NULL::bigint, NULL::text, array_position(v_gchunk, r.chunk_id),
         v_gpath[array_position(v_gchunk, r.chunk_id)]
  FROM r WHERE r.fr <= v_plan.top_k ORDER BY r.fr;

  -- A strategy's step after search (kb._after_search_<name>): more rows after the hits
  -- (their chunk, rank, and the hit and reference they come from).
  IF cardinality(v_rows) > 0 THEN
    CASE v_plan.strategy
      /*@after_search_arms*/
      ELSE NULL;
    END CASE;
  END IF;
END
$$;
COMMENT ON FUNCTION kb._search_core(integer, text, jsonb) IS
  'Internal: every stage of a search of one knowledge base, by kb_id (plan, channels and '
  'fusion or the strategy''s own search, rerank, the strategy''s step after search), for '
  'kb.search, kb.explain_search and kb.build_context. Every statement reads that kb_id''s '
  'rows only (docs/operations.md, "Beyond one machine").';

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
