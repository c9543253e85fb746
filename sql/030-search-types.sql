-- What a search hands from one stage to the next (sql/400-440, and a strategy's own
-- stages in its file). Created only when missing: a change to one needs a migration.
DO $$
BEGIN
  -- A search's plan, settled once by kb._search_plan: the KB's generation, the validated
  -- retrieval_config with every default filled in, and what the stages read from it.
  IF to_regtype('kb.search_plan') IS NULL THEN
    CREATE TYPE kb.search_plan AS (
      kb_id           integer,
      index_id        bigint,
      strategy        text,
      indexing_config jsonb,
      config          jsonb,             -- the validated retrieval_config
      method          text,
      top_k           integer,
      depth           integer,           -- candidates each channel lists
      fused_limit     integer,           -- rows fusion hands on (top_k, or rerank's candidates)
      filter          jsonb,
      vector_weight   double precision,  -- after plain_query_shift; 0 without an embedding
      graph_weight    double precision,  -- 0: no knowledge-graph channel
      threshold       double precision,  -- similarity_threshold
      rerank          boolean,
      zscore          boolean,           -- fusion zscore (else RRF)
      bm25_k1         double precision,
      embedding       real[],            -- the query's vector (NULL: not embedded)
      expansion       jsonb,             -- full_text's term expansion: {lexeme: weight}
      note            text,
      usage           jsonb
    );
  END IF;
  -- One result of a stage: its rank and score in each channel, fused, reranked.
  IF to_regtype('kb.search_stage') IS NULL THEN
    CREATE TYPE kb.search_stage AS (
      chunk_id bigint, vector_rank integer, vector_score double precision,
      bm25_rank integer, bm25_score double precision, fused_rank integer,
      fused_score double precision, rerank_rank integer, rerank_score double precision
    );
  END IF;
END
$$;
