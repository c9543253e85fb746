-- Context assembly for answering: cited, budgeted, honouring usage_mode.

CREATE OR REPLACE FUNCTION kb.build_context(
    kb text,
    query text,
    token_budget integer DEFAULT 2000,
    max_chunks_per_document integer DEFAULT 3,
    relevance_threshold double precision DEFAULT NULL,
    expand_sections boolean DEFAULT false,
    top_k integer DEFAULT 20,
    method text DEFAULT NULL,
    rerank boolean DEFAULT NULL,
    filter jsonb DEFAULT NULL,
    options jsonb DEFAULT NULL
) RETURNS TABLE (context text, sources jsonb, has_relevant boolean, fallback text,
                 tokens_used integer)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb   kb.knowledge_base;
  v_rows jsonb;
  v_out  kb.assembled_context;
BEGIN
  v_kb := kb._get_kb(kb);
  IF token_budget IS NULL OR token_budget < 1 OR token_budget > 1000000 THEN
    RAISE EXCEPTION 'token_budget must be between 1 and 1000000, not %', token_budget
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_chunks_per_document IS NULL OR max_chunks_per_document < 1 THEN
    RAISE EXCEPTION 'max_chunks_per_document must be at least 1, not %', max_chunks_per_document
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  WITH always AS (
    SELECT jsonb_build_object(
             'kind', d.usage_mode, 'chunk_id', c.id, 'document_id', d.id, 'title', d.title,
             'heading_path', to_jsonb(c.heading_path), 'page', c.page, 'origin', c.origin,
             'content', c.content, 'score', NULL) AS row,
           CASE d.usage_mode WHEN 'system' THEN 0 ELSE 1 END AS grp, d.id AS did, c.ordinal AS ord
    FROM kb.document d JOIN kb.chunk c ON c.document_id = d.id AND c.index_id = v_kb.active_index_id
                                        AND c.kb_id = d.kb_id
    WHERE d.kb_id = v_kb.id AND d.usage_mode IN ('system', 'policy')
  ), hits AS (
    SELECT s.final_rank, s.score, c.*, d.title, d.id AS did,
           CASE WHEN s.rerank_score IS NOT NULL THEN s.rerank_score ELSE s.vector_score END AS comparable
    FROM kb._search_core(v_kb.id, query, kb._overrides(
           jsonb_build_object('top_k', top_k, 'method', method, 'filter', filter,
                              'rerank', rerank), options)) s
    JOIN kb.chunk c ON c.id = s.chunk_id AND c.kb_id = v_kb.id
    JOIN kb.document d ON d.id = c.document_id AND d.kb_id = v_kb.id AND d.usage_mode = 'rag'
  ), rag AS (
    SELECT jsonb_build_object(
             'kind', 'rag', 'chunk_id', h.id, 'document_id', h.did, 'title', h.title,
             'heading_path', to_jsonb(h.heading_path), 'page', h.page, 'origin', h.origin,
             'page_end', (SELECT n.page_end FROM kb.page_index_node n
                           WHERE n.chunk_id = h.id AND n.kb_id = v_kb.id),
             'content', h.content, 'score', h.score, 'comparable_score', h.comparable,
             'passed', relevance_threshold IS NULL OR coalesce(h.comparable >= relevance_threshold, false),
             'section', CASE WHEN expand_sections AND cardinality(h.heading_path) > 0 THEN (
                 SELECT jsonb_agg(jsonb_build_object(
                          'chunk_id', s.id, 'document_id', h.did, 'title', h.title,
                          'heading_path', to_jsonb(s.heading_path), 'page', s.page,
                          'origin', s.origin, 'content', s.content) ORDER BY s.ordinal)
                 FROM kb.chunk s
                 WHERE s.document_id = h.did AND s.index_id = h.index_id AND s.kb_id = v_kb.id
                   AND s.heading_path[1:cardinality(h.heading_path)] = h.heading_path)
             END) AS row,
           h.final_rank
    FROM hits h
  )
  SELECT coalesce(jsonb_agg(x.row ORDER BY x.grp, x.k1, x.k2), '[]') INTO v_rows
  FROM (SELECT row, grp, did AS k1, ord AS k2 FROM always
        UNION ALL SELECT row, 2, final_rank, 0 FROM rag) x;
  v_out := kb._assemble_context(v_rows, token_budget, max_chunks_per_document);
  RETURN QUERY SELECT v_out.context, v_out.sources, v_out.has_relevant, v_out.fallback,
                      v_out.tokens_used;
END
$$;
COMMENT ON FUNCTION kb.build_context(text, text, integer, integer, double precision, boolean, integer, text, boolean, jsonb, jsonb) IS
  'Prompt-ready context for a question: system documents first, then policy documents (marked as '
  'guardrails), then retrieved chunks in rank order under [Source n: title › section (p.N)] '
  'headers, within token_budget and at most max_chunks_per_document per document. '
  'relevance_threshold applies to the cosine similarity (or rerank score when reranking); when '
  'no chunk passes, has_relevant is false and fallback holds a fixed "outside what I cover" text.';
