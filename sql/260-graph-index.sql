-- GraphIndex's references: the PageIndex tree (kb._store_page_index) plus the cross-references
-- between its sections. kb._search_core adds the sections the hits reference.

CREATE OR REPLACE FUNCTION kb._store_graph_index(p_kb_id integer, p_index_id bigint,
                                                 p_document_id bigint, p_artifacts jsonb,
                                                 p_chunk_ids jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  -- The document's old edges went with its old chunks (ON DELETE CASCADE).
  PERFORM kb._store_page_index(p_kb_id, p_index_id, p_document_id, p_artifacts - 'edges',
                               p_chunk_ids);
  INSERT INTO kb.graph_index_reference (index_id, kb_id, document_id, source_chunk_id,
                                   target_chunk_id, ordinal, kind, phrase, resolved_by)
  SELECT p_index_id, p_kb_id, p_document_id, (p_chunk_ids->>(e->>'source'))::bigint,
         (p_chunk_ids->>(e->>'target'))::bigint, i::integer, e->>'kind', e->>'phrase',
         e->>'resolved_by'
  FROM jsonb_array_elements(coalesce(p_artifacts->'edges', '[]')) WITH ORDINALITY AS x(e, i);
END
$$;
COMMENT ON FUNCTION kb._store_graph_index(integer, bigint, bigint, jsonb, jsonb) IS
  'Internal: writes one document''s GraphIndex tree and cross-references for an index generation.';

CREATE OR REPLACE VIEW kb.graph_index_references WITH (security_invoker = true) AS
  SELECT k.name AS kb, d.title AS document, e.document_id, s.heading_path AS source_path,
         t.heading_path AS target_path, e.kind, e.phrase, e.resolved_by,
         sn.node_id AS source_node_id, tn.node_id AS target_node_id,
         e.source_chunk_id, e.target_chunk_id, e.kb_id
  FROM kb.graph_index_reference e
  JOIN kb.knowledge_base k ON k.id = e.kb_id AND k.active_index_id = e.index_id
  JOIN kb.document d ON d.kb_id = e.kb_id AND d.id = e.document_id
  JOIN kb.chunk s ON s.kb_id = e.kb_id AND s.id = e.source_chunk_id
  JOIN kb.chunk t ON t.kb_id = e.kb_id AND t.id = e.target_chunk_id
  LEFT JOIN kb.page_index_node sn ON sn.kb_id = e.kb_id AND sn.chunk_id = e.source_chunk_id
  LEFT JOIN kb.page_index_node tn ON tn.kb_id = e.kb_id AND tn.chunk_id = e.target_chunk_id;
COMMENT ON VIEW kb.graph_index_references IS
  'The serving GraphIndex cross-references of every KB: which section refers to which, how, '
  'in what words, and whether a rule or the LLM resolved it.';
GRANT SELECT ON kb.graph_index_references TO PUBLIC;

CREATE OR REPLACE VIEW kb.graph_index_documents WITH (security_invoker = true) AS
  SELECT k.name AS kb, d.title AS document, t.document_id, t.node_count,
         coalesce((t.structure_detail->'references'->>'rule_edges')::integer, 0) AS rule_edges,
         coalesce((t.structure_detail->'references'->>'llm_edges')::integer, 0) AS llm_edges,
         coalesce((t.structure_detail->'references'->>'sections_asked')::integer, 0)
           AS sections_asked,
         coalesce((t.structure_detail->'references'->>'dropped_unknown_ids')::integer, 0)
           AS dropped_unknown_ids,
         coalesce((t.structure_detail->'references'->>'dropped_structural')::integer, 0)
           AS dropped_structural,
         t.structure_detail->'references'->>'llm' AS llm_note, t.kb_id
  FROM kb.page_index_toc t
  JOIN kb.knowledge_base k ON k.id = t.kb_id AND k.active_index_id = t.index_id
  JOIN kb.kb_index ix ON ix.kb_id = t.kb_id AND ix.id = t.index_id
  JOIN kb.document d ON d.kb_id = t.kb_id AND d.id = t.document_id
  WHERE ix.indexing_config->>'strategy' = 'graph_index';
COMMENT ON VIEW kb.graph_index_documents IS
  'Per GraphIndex document: its sections, and how many cross-references each way found '
  '(rule_edges without an LLM, llm_edges), the sections the LLM read, and the ids it named '
  'that were dropped (unknown, or the section''s own parent or child).';
GRANT SELECT ON kb.graph_index_documents TO PUBLIC;

-- GraphIndex's step after search (kb._search_core calls it): the sections the hits
-- reference (first degree), after the hits, in the order of the hit that refers to them;
-- each names that hit and the reference.
CREATE OR REPLACE FUNCTION kb._after_search_graph_index(p_plan kb.search_plan,
                                                        p_rows kb.search_stage[])
RETURNS TABLE (chunk_id bigint, final_rank integer, expanded_from bigint, expansion text)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_hits bigint[];
BEGIN
  IF NOT coalesce((p_plan.config->>'reference_expansion')::boolean, false)
     OR coalesce((p_plan.config->>'expansion_limit')::integer, 0) <= 0 THEN
    RETURN;
  END IF;
  -- The hits returned, in their order.
  v_hits := ARRAY(SELECT x.chunk_id FROM unnest(p_rows) x
                  ORDER BY coalesce(x.rerank_rank, x.fused_rank) LIMIT p_plan.top_k);
  RETURN QUERY
  WITH cand AS (
    SELECT e.target_chunk_id, h.chunk_id AS via, h.fr, e.ordinal, e.kind, e.phrase,
           row_number() OVER (PARTITION BY e.target_chunk_id ORDER BY h.fr, e.ordinal) AS k
    FROM unnest(v_hits) WITH ORDINALITY AS h(chunk_id, fr)
    JOIN kb.graph_index_reference e ON e.source_chunk_id = h.chunk_id AND e.kb_id = p_plan.kb_id
    WHERE e.target_chunk_id <> ALL (v_hits)
  )
  SELECT c.target_chunk_id,
         (cardinality(v_hits) + row_number() OVER (ORDER BY c.fr, c.ordinal))::integer,
         c.via, c.kind || ': ' || c.phrase
  FROM cand c WHERE c.k = 1
  ORDER BY c.fr, c.ordinal
  LIMIT (p_plan.config->>'expansion_limit')::integer;
END
$$;
COMMENT ON FUNCTION kb._after_search_graph_index(kb.search_plan, kb.search_stage[]) IS
  'Internal: a GraphIndex search''s expansion (reference_expansion, at most expansion_limit '
  'sections): the sections the hits reference, each ranked after the hits, with the hit that '
  'refers to it (expanded_from) and the reference (expansion).';
