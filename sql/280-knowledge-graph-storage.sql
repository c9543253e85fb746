-- The knowledge-graph index of ChunkEmbed KBs (indexing_config.knowledge_graph): how a
-- document's vertices and edges are stored and replaced, and what a removal marks stale.

CREATE OR REPLACE FUNCTION kb._store_knowledge_graph(p_kb_id integer, p_index_id bigint,
                                                     p_document_id bigint, p_graph jsonb,
                                                     p_chunk_ids jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ids jsonb;
BEGIN
  -- The document's previous graph in this generation (its edges cascade).
  DELETE FROM kb.graph_node
   WHERE kb_id = p_kb_id AND index_id = p_index_id AND document_id = p_document_id;
  WITH ins AS (
    INSERT INTO kb.graph_node (index_id, kb_id, document_id, local_id, graph, kind, name,
                               qualified_name, path, module, language, member_of, start_line,
                               end_line, chunk_id, properties, embedding)
    SELECT p_index_id, p_kb_id, p_document_id, (n->>'local_id')::integer, n->>'graph', n->>'kind',
           n->>'name', n->>'qualified_name', n->>'path', n->>'module', n->>'language',
           n->>'member_of', (n->>'start_line')::integer, (n->>'end_line')::integer,
           (p_chunk_ids->>(n->>'chunk'))::bigint, coalesce(n->'properties', '{}'),
           (n->>'embedding')::vector
    FROM jsonb_array_elements(coalesce(p_graph->'nodes', '[]')) AS n
    RETURNING id, local_id
  )
  SELECT coalesce(jsonb_object_agg(local_id::text, id), '{}') INTO v_ids FROM ins;
  INSERT INTO kb.graph_edge (index_id, kb_id, document_id, source_id, kind, target_id,
                             target_name, target_modules, qualifier, line, confidence,
                             resolution, label, chunk_id)
  SELECT p_index_id, p_kb_id, p_document_id, (v_ids->>(e->>'source'))::bigint, e->>'kind',
         (v_ids->>(e->>'target'))::bigint, e->>'target_name',
         coalesce(ARRAY(SELECT jsonb_array_elements_text(e->'target_modules')), '{}'),
         e->>'qualifier', (e->>'line')::integer,
         coalesce((e->>'confidence')::real, CASE WHEN e->>'target' IS NOT NULL THEN 1 END),
         coalesce(e->>'resolution', CASE WHEN e->>'target' IS NOT NULL THEN 'structure' END),
         e->>'label', (p_chunk_ids->>(e->>'chunk'))::bigint
  FROM jsonb_array_elements(coalesce(p_graph->'edges', '[]')) AS e;
  -- Entity merge decisions (kept across documents; a pair decided once, a key merged once).
  INSERT INTO kb.graph_entity_merge (index_id, kb_id, key, other_key, merged, decided_by,
                                     reason, similarity)
  SELECT p_index_id, p_kb_id, m->>'key', m->>'other_key', (m->>'merged')::boolean, m->>'decided_by',
         m->>'reason', (m->>'similarity')::real
  FROM jsonb_array_elements(coalesce(p_graph->'merges', '[]')) AS m
  ON CONFLICT DO NOTHING;
  -- New entities make the generation's communities stale (removed ones: kb._graph_node_gone).
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(p_graph->'nodes', '[]')) n
              WHERE n->>'kind' = 'entity') THEN
    PERFORM kb._communities_stale(p_kb_id, ARRAY[p_index_id]);
  END IF;
END
$$;
COMMENT ON FUNCTION kb._store_knowledge_graph(integer, bigint, bigint, jsonb, jsonb) IS
  'Internal: writes one document''s knowledge-graph vertices and edges for an index generation, '
  'replacing the ones it had there.';

CREATE OR REPLACE FUNCTION kb._communities_stale(p_kb_id integer, p_index_ids bigint[])
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  INSERT INTO kb.graph_community_state AS s (index_id, kb_id, stale)
  SELECT ix.id, ix.kb_id, true FROM kb.kb_index ix
   WHERE ix.kb_id = p_kb_id AND ix.id = ANY (p_index_ids)
     AND coalesce((ix.indexing_config->'knowledge_graph'->>'communities')::boolean, false)
  ON CONFLICT (index_id, kb_id) DO UPDATE SET stale = true
$$;
COMMENT ON FUNCTION kb._communities_stale(integer, bigint[]) IS
  'Internal: marks generations whose entities changed, where communities are on.';

CREATE OR REPLACE FUNCTION kb._graph_node_gone() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb integer;
BEGIN
  FOR v_kb IN SELECT DISTINCT kb_id FROM gone WHERE kind = 'entity' LOOP
    PERFORM kb._communities_stale(
      v_kb, ARRAY(SELECT DISTINCT index_id FROM gone WHERE kb_id = v_kb AND kind = 'entity'));
  END LOOP;
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION kb._graph_node_gone() IS
  'Internal: entities removed (a document deleted or re-indexed) make communities stale.';
CREATE OR REPLACE TRIGGER graph_node_gone AFTER DELETE ON kb.graph_node
  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION kb._graph_node_gone();
