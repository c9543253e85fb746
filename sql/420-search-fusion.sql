-- Fusion: a search's channels (sql/410) joined into one ranked list. vector and full_text
-- keep their one list's scores; hybrid fuses the vector, BM25 and knowledge-graph lists by
-- standardised scores (fusion zscore) or weighted RRF, by the plan's weights.

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

CREATE OR REPLACE FUNCTION kb._fuse(p_plan kb.search_plan, p_query text,
    OUT rows kb.search_stage[], OUT graph_chunks bigint[], OUT graph_paths text[])
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF p_plan.graph_weight > 0 THEN
    SELECT array_agg(g.chunk_id ORDER BY g.rank), array_agg(g.path ORDER BY g.rank)
      INTO graph_chunks, graph_paths
      FROM kb._graph_channel(p_plan.kb_id, p_plan.index_id, p_query,
                             (p_plan.config->>'graph_limit')::integer,
                             (p_plan.config->>'graph_hops')::integer, p_plan.filter,
                             p_plan.embedding) g;
  END IF;
  rows := ARRAY(
    WITH v AS (
      SELECT x.chunk_id, x.score AS similarity, x.rank AS rn, x.z FROM kb._vector_channel(p_plan) x
    ), t AS (
      SELECT x.chunk_id, x.score, x.rank AS rn, x.z FROM kb._bm25_channel(p_plan, p_query) x
    ), gr0 AS (
      SELECT u.chunk_id, u.rn::integer AS rn
      FROM unnest(graph_chunks) WITH ORDINALITY AS u(chunk_id, rn)
    ), gr AS (  -- the graph channel has ranks only: 1/rank stands for its score
      SELECT g.chunk_id, g.rn,
             coalesce((1.0 / g.rn - avg(1.0 / g.rn) OVER ())
                      / nullif(stddev_pop(1.0 / g.rn) OVER (), 0), 0)::double precision AS z
      FROM gr0 g
    ), f AS (
      SELECT coalesce(v.chunk_id, t.chunk_id, gr.chunk_id) AS chunk_id, v.rn AS vrank,
             v.similarity AS vscore, t.rn AS trank, t.score AS tscore,
             CASE p_plan.method
               WHEN 'vector' THEN v.similarity
               WHEN 'full_text' THEN t.score
               ELSE CASE WHEN p_plan.zscore
                 -- A candidate missing from a list counts as one standard deviation
                 -- below that list's lowest (so a lone BM25 hit, z 0, still counts).
                 THEN p_plan.vector_weight * coalesce(v.z, (SELECT min(z) - 1 FROM v), 0)
                      + (1 - p_plan.vector_weight) * coalesce(t.z, (SELECT min(z) - 1 FROM t), 0)
                      + p_plan.graph_weight * coalesce(gr.z, (SELECT min(z) - 1 FROM gr), 0)
                 ELSE kb.rrf_fuse(ARRAY[v.rn, t.rn, gr.rn],
                                  ARRAY[p_plan.vector_weight, 1 - p_plan.vector_weight,
                                        p_plan.graph_weight],
                                  (p_plan.config->>'rrf_k')::double precision) END
             END AS fused
      FROM v FULL JOIN t ON t.chunk_id = v.chunk_id
      FULL JOIN gr ON gr.chunk_id = coalesce(v.chunk_id, t.chunk_id)
    ), miss AS (
      -- BM25-only candidates still get their cosine similarity (for thresholds, explain):
      -- one primary-key scan for all of them. (A join here was planned as a hash join that
      -- read every row of kb.embedding, every KB's vectors; a probe per candidate ran the
      -- row-level security lookup per candidate.) Without a threshold only the rows
      -- returned need it: the best fused_limit of them hold every one that is returned
      -- (0.6 ms of a 100-candidate hybrid query, A/B).
      SELECT e.chunk_id, 1 - (e.embedding <=> p_plan.embedding::vector) AS similarity
      FROM kb.embedding e
      WHERE p_plan.embedding IS NOT NULL AND e.kb_id = p_plan.kb_id
        AND e.chunk_id = ANY (ARRAY(SELECT f.chunk_id FROM f WHERE f.vscore IS NULL
                                    ORDER BY f.fused DESC, f.chunk_id
                                    LIMIT CASE WHEN p_plan.threshold IS NULL
                                               THEN p_plan.fused_limit END))
    ), g AS (
      SELECT f.chunk_id, f.vrank, coalesce(f.vscore, m.similarity) AS vscore,
             f.trank, f.tscore, f.fused
      FROM f LEFT JOIN miss m ON m.chunk_id = f.chunk_id
    )
    SELECT ROW(g.chunk_id, g.vrank, g.vscore, g.trank, g.tscore,
               row_number() OVER (ORDER BY g.fused DESC, g.chunk_id), g.fused,
               NULL, NULL)::kb.search_stage
    FROM g
    WHERE p_plan.threshold IS NULL OR p_plan.embedding IS NULL OR g.vscore >= p_plan.threshold
    ORDER BY g.fused DESC, g.chunk_id
    LIMIT p_plan.fused_limit);
END
$$;
COMMENT ON FUNCTION kb._fuse(kb.search_plan, text) IS
  'Internal: a search''s channels fused into one ranked list (the plan''s fused_limit rows '
  'that pass its similarity_threshold), each row with its rank and score in every channel; '
  'and the knowledge-graph channel''s chunks and paths, in its order.';
