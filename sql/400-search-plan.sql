-- A search's plan: everything the stages need, settled once (sql/410 the channels, 420
-- fusion, 430 rerank, 440 the entry points). Defaults come from the validated
-- retrieval_config (kbpg_db.config, through kb._prepare_query) and the constants
-- kbpg migrate writes in from the same models (the /*@...*/ markers).

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

CREATE OR REPLACE FUNCTION kb._search_plan(p_kb_id integer, p_query text, p_overrides jsonb)
RETURNS kb.search_plan
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb      kb.knowledge_base;
  v_ix      kb.kb_index;
  v_prep    kb.prepared_query;
  v_plan    kb.search_plan;
  v_cfg     jsonb;
  v_asked   jsonb;
  v_expands boolean;
  v_missing boolean := false;  -- the generation's words have no vectors (term expansion)
  v_words   text[];
  v_count   integer;
BEGIN
  v_kb := kb._get_kb_by_id(p_kb_id);
  PERFORM kb._check_query(p_query);
  v_ix := kb._active_index(v_kb);
  -- full_text's term expansion, decided once: as asked (the call's term_expansion, else
  -- the KB's; unset: its model's default; a value that is no number is left to
  -- kb._prepare_query's error), and whether the generation's words have vectors for it.
  v_asked := CASE WHEN p_overrides ? 'term_expansion' THEN p_overrides->'term_expansion'
                  ELSE v_kb.retrieval_config->'term_expansion' END;
  v_expands := coalesce(p_overrides->>'method', v_kb.retrieval_config->>'method') = 'full_text'
    AND CASE WHEN v_asked IS NULL OR jsonb_typeof(v_asked) = 'null'
               THEN kb._term_expansion('{}', v_ix.indexing_config) > 0
             WHEN jsonb_typeof(v_asked) = 'number' THEN v_asked::text::numeric > 0
             ELSE false END;
  IF v_expands THEN
    v_missing := NOT kb._has_term_vectors(p_kb_id, v_ix.id);
  END IF;
  IF p_overrides = '{}' AND v_kb.retrieval_config->>'method' = 'full_text'
     AND v_kb.retrieval_config->>'rerank_model' IS DISTINCT FROM 'llm'
     AND (NOT v_expands OR v_missing) THEN
    -- The stored config was validated when written, and full_text without term expansion
    -- (none asked for, or no vocabulary vectors yet) embeds nothing: this path runs no
    -- PL/Python at all (rerank_model "llm" is resolved to the index generation's chat
    -- model by kb._prepare_query).
    v_prep := ROW(v_kb.retrieval_config, NULL, NULL, NULL)::kb.prepared_query;
  ELSE
    -- Where the words have no vectors yet, full_text does not embed the query for an
    -- expansion that has nothing to read (the note below says so).
    v_prep := kb._prepare_query(v_ix.indexing_config, v_kb.retrieval_config, p_overrides,
                                p_query, NOT v_missing);
  END IF;
  v_cfg := v_prep.config;
  v_plan.kb_id := p_kb_id;
  v_plan.index_id := v_ix.id;
  v_plan.strategy := v_ix.indexing_config->>'strategy';
  v_plan.indexing_config := v_ix.indexing_config;
  v_plan.config := v_cfg;
  v_plan.method := v_cfg->>'method';
  v_plan.top_k := (v_cfg->>'top_k')::integer;
  v_plan.filter := CASE WHEN jsonb_typeof(v_cfg->'filter') = 'object' THEN v_cfg->'filter' END;
  v_plan.embedding := v_prep.embedding;
  v_plan.note := v_prep.note;
  v_plan.usage := v_prep.usage;
  v_plan.threshold := (v_cfg->>'similarity_threshold')::double precision;
  v_plan.rerank := (v_cfg->>'rerank')::boolean;
  v_plan.zscore := v_cfg->>'fusion' = 'zscore';
  -- bm25_k1 unset: by method (config.BM25_K1*)
  v_plan.bm25_k1 := coalesce((v_cfg->>'bm25_k1')::double precision,
                             CASE WHEN v_plan.method = 'full_text'
                                  THEN /*@bm25_k1_full_text*/1.5/*@*/
                                  ELSE /*@bm25_k1*/1.2/*@*/ END);
  v_plan.vector_weight := CASE WHEN v_prep.embedding IS NULL THEN 0  -- provider down: BM25 carries all
                               ELSE (v_cfg->>'vector_weight')::double precision END;
  -- A query in plain words leans on the vectors (plain_query_shift).
  IF v_plan.method = 'hybrid' AND v_plan.vector_weight > 0 AND v_plan.vector_weight < 1
     AND coalesce((v_cfg->>'plain_query_shift')::double precision, 0) > 0
     AND NOT kb._query_has_exact_cue(p_kb_id, v_ix, p_query) THEN
    v_plan.vector_weight := least(1, v_plan.vector_weight
                                     + (v_cfg->>'plain_query_shift')::double precision);
  END IF;
  IF v_plan.method = 'hybrid' THEN
    v_plan.usage := coalesce(v_plan.usage, '{}') || jsonb_build_object(
      'fusion', jsonb_build_object('vector_weight', v_plan.vector_weight));
  END IF;
  -- The knowledge graph's channel: hybrid, on KBs that have one.
  v_plan.graph_weight := CASE
    WHEN v_plan.method = 'hybrid'
         AND (v_ix.indexing_config->'knowledge_graph'->>'enabled')::boolean
         AND (v_cfg->>'graph_weight')::double precision > 0
    THEN (v_cfg->>'graph_weight')::double precision ELSE 0 END;
  v_plan.depth := CASE WHEN v_plan.method = 'hybrid'
                       THEN greatest((v_cfg->>'fusion_depth')::integer, v_plan.top_k)
                       ELSE v_plan.top_k END;
  IF v_plan.rerank THEN
    v_plan.depth := greatest(v_plan.depth, (v_cfg->>'candidate_count')::integer);
  END IF;
  v_plan.fused_limit := CASE WHEN v_plan.rerank
                             THEN greatest((v_cfg->>'candidate_count')::integer, v_plan.top_k)
                             ELSE v_plan.top_k END;
  -- full_text: the indexed words nearest the query's embedding join BM25's query, and
  -- usage names them; where the words have no vectors yet, the note says so.
  v_count := CASE WHEN v_plan.method = 'full_text'
                  THEN kb._term_expansion(v_cfg, v_ix.indexing_config) ELSE 0 END;
  IF v_count > 0 THEN
    IF v_prep.embedding IS NOT NULL THEN
      SELECT e.terms, e.words INTO v_plan.expansion, v_words
        FROM kb._expansion_terms(p_kb_id, v_ix.id, p_query, v_prep.embedding, v_count,
                                 (v_cfg->>'term_expansion_weight')::double precision,
                                 v_ix.indexing_config) e;
    END IF;
    IF v_words IS NOT NULL THEN
      v_plan.usage := coalesce(v_plan.usage, '{}') || jsonb_build_object(
        'term_expansion', jsonb_build_object('words', v_words));
    ELSIF v_missing THEN
      v_plan.note := concat_ws('; ', v_plan.note,
        'term expansion: this knowledge base''s words have no vectors yet '
        '(the worker embeds them when its queue is empty; kb.refresh_term_vectors(kb) at once)');
    END IF;
  END IF;
  RETURN v_plan;
END
$$;
COMMENT ON FUNCTION kb._search_plan(integer, text, jsonb) IS
  'Internal: a search''s plan (kb.search_plan): the KB''s serving generation, the call''s '
  'options over the KB''s retrieval_config, validated with every default filled in, the '
  'query''s embedding where a channel needs it, and what each stage reads (depths, weights, '
  'BM25''s k1, full_text''s expansion terms). No other function decides a default.';
