-- Rerank: the fused list's first candidates scored again by a reranker (kb._rerank: a
-- local ONNX cross-encoder, a provider's rerank model, or a chat model's listwise ranking).

CREATE OR REPLACE FUNCTION kb._rerank_stage(p_plan kb.search_plan, p_query text,
    p_rows kb.search_stage[], OUT rows kb.search_stage[], OUT usage jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_rows   kb.search_stage[];
  v_docs   text[];
  v_scores double precision[];
  v_usage  jsonb;
BEGIN
  v_rows := p_rows[1:(p_plan.config->>'candidate_count')::integer];
  v_docs := ARRAY(SELECT c.content FROM unnest(v_rows) WITH ORDINALITY AS r
                    JOIN kb.chunk c ON c.id = r.chunk_id AND c.kb_id = p_plan.kb_id
                  ORDER BY r.ordinality);
  SELECT r.scores, r.usage INTO v_scores, v_usage
  FROM kb._rerank(p_plan.config, p_query, v_docs) r;
  -- An LLM ranking adds its calls, tokens and cost (rerank.llm).
  usage := jsonb_build_object('rerank',
    jsonb_build_object('model', p_plan.config->>'rerank_model', 'documents', cardinality(v_docs))
    || coalesce(v_usage, '{}'));
  rows := ARRAY(
    SELECT ROW(r.chunk_id, r.vector_rank, r.vector_score, r.bm25_rank, r.bm25_score,
               r.fused_rank, r.fused_score,
               row_number() OVER (ORDER BY u.s DESC, r.fused_rank), u.s)::kb.search_stage
    FROM unnest(v_rows) WITH ORDINALITY r JOIN unnest(v_scores) WITH ORDINALITY u(s, i)
      ON u.i = r.ordinality
    WHERE u.s >= coalesce((p_plan.config->>'rerank_threshold')::double precision, '-Infinity')
    ORDER BY u.s DESC, r.fused_rank);
END
$$;
COMMENT ON FUNCTION kb._rerank_stage(kb.search_plan, text, kb.search_stage[]) IS
  'Internal: the first candidate_count rows of a search reranked (those under '
  'rerank_threshold dropped), and what the reranker used.';
