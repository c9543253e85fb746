-- The knowledge-graph index of ChunkEmbed KBs (indexing_config.knowledge_graph): storage,
-- reference resolution across files, and the functions for direct graph questions.

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

CREATE OR REPLACE FUNCTION kb._store_chunk_embed(p_kb_id integer, p_index_id bigint,
                                                 p_document_id bigint, p_artifacts jsonb,
                                                 p_chunk_ids jsonb)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT kb._store_knowledge_graph(p_kb_id, p_index_id, p_document_id, p_artifacts->'graph',
                                   p_chunk_ids)
$$;
COMMENT ON FUNCTION kb._store_chunk_embed(integer, bigint, bigint, jsonb, jsonb) IS
  'Internal: a ChunkEmbed document''s own tables: its knowledge graph, when the KB has one.';

CREATE OR REPLACE FUNCTION kb._graph_target_kinds(p_kind text) RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- The same lists as kbpg_db.code_graph.TARGET_KINDS.
  SELECT CASE p_kind
           WHEN 'calls' THEN ARRAY['function', 'method', 'class', 'struct']
           WHEN 'inherits' THEN ARRAY['class', 'interface', 'struct', 'trait']
           WHEN 'implements' THEN ARRAY['interface', 'trait', 'class']
           WHEN 'imports' THEN ARRAY['file']
         END
$$;
COMMENT ON FUNCTION kb._graph_target_kinds(text) IS
  'Internal: the vertex kinds a calls, inherits, implements or imports reference may point at.';

CREATE OR REPLACE FUNCTION kb._module_matches(p_module text, p_path text, p_wanted text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- Whole, or as the last path parts ('shapes/base' matches 'src/shapes/base').
  SELECT p_module = p_wanted OR p_path = p_wanted
      OR right(p_module, length(p_wanted) + 1) = '/' || p_wanted
      OR right(p_path, length(p_wanted) + 1) = '/' || p_wanted
$$;
COMMENT ON FUNCTION kb._module_matches(text, text, text) IS
  'Internal: whether a file (its module key and path) is the module a reference names.';

CREATE OR REPLACE FUNCTION kb._language_family(p_language text) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT CASE WHEN p_language IN ('c', 'cpp') THEN 'c'
              WHEN p_language IN ('javascript', 'typescript', 'tsx') THEN 'javascript'
              ELSE p_language END
$$;
COMMENT ON FUNCTION kb._language_family(text) IS
  'Internal: languages whose files reference one another (C with C++, JavaScript with '
  'TypeScript); a reference never resolves into another family.';

CREATE OR REPLACE FUNCTION kb._module_tier(p_module text, p_path text, p_modules text[])
RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce(min(m.i)::integer, 1000)
    FROM unnest(p_modules) WITH ORDINALITY AS m(mod, i)
   WHERE kb._module_matches(p_module, p_path, m.mod)
$$;
COMMENT ON FUNCTION kb._module_tier(text, text, text[]) IS
  'Internal: which of the modules a reference may come from (1 the first) a file is; 1000: none.';

CREATE OR REPLACE FUNCTION kb._graph_edges(p_kb_id integer, p_index_id bigint,
                                           p_sources bigint[] DEFAULT NULL,
                                           p_target_names text[] DEFAULT NULL)
RETURNS TABLE (edge_id bigint, source_id bigint, target_id bigint, kind text,
               confidence real, resolution text, line integer, target_name text,
               label text, chunk_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_edges bigint[];
BEGIN
  -- Which edges: from some vertices, to targets of some names, or all of the generation
  -- (each its own statement, so each is planned on its own index).
  IF p_sources IS NOT NULL THEN
    v_edges := ARRAY(SELECT g.id FROM kb.graph_edge g
                      WHERE g.source_id = ANY (p_sources) AND g.kb_id = p_kb_id);
  ELSIF p_target_names IS NOT NULL THEN
    v_edges := ARRAY(SELECT g.id FROM kb.graph_node t
                       JOIN kb.graph_edge g ON g.target_id = t.id AND g.kb_id = t.kb_id
                      WHERE t.index_id = p_index_id AND t.kb_id = p_kb_id
                        AND t.name = ANY (p_target_names)
                     UNION ALL
                     SELECT g.id FROM kb.graph_edge g
                      WHERE g.index_id = p_index_id AND g.kb_id = p_kb_id AND g.target_id IS NULL
                        AND g.target_name = ANY (p_target_names));
  ELSE
    v_edges := ARRAY(SELECT g.id FROM kb.graph_edge g
                      WHERE g.index_id = p_index_id AND g.kb_id = p_kb_id);
  END IF;
  RETURN QUERY
  -- Edges stored resolved: structure, references within one file, relations.
  SELECT e.id, e.source_id, e.target_id, e.kind, e.confidence, e.resolution, e.line,
         coalesce(e.target_name, t.name), e.label, e.chunk_id
    FROM kb.graph_edge e JOIN kb.graph_node t ON t.id = e.target_id AND t.kb_id = e.kb_id
   WHERE e.id = ANY (v_edges) AND e.kb_id = p_kb_id
  UNION ALL
  -- References to other files, resolved as they are read: 'import' where one of the
  -- modules the reference may come from holds the target (the first such module wins),
  -- else 'name_only' to every definition of that name in the same language family; the
  -- confidence is split among the candidates. A reference with none keeps target NULL
  -- ('external': a library, a builtin).
  SELECT e.id, e.source_id, c.id, e.kind,
         coalesce(c.confidence, 0)::real, coalesce(c.resolution, 'external'), e.line,
         e.target_name, e.label, e.chunk_id
    FROM kb.graph_edge e
    JOIN kb.graph_node src ON src.id = e.source_id AND src.kb_id = e.kb_id
    LEFT JOIN LATERAL (
      SELECT r.id,
             (CASE WHEN r.tier < 1000 THEN 0.9 ELSE 0.5 END / count(*) OVER ()) AS confidence,
             CASE WHEN r.tier < 1000 THEN 'import' ELSE 'name_only' END AS resolution
      FROM (
        SELECT q.id, q.tier, min(q.tier) OVER () AS best
        FROM (
          SELECT n.id, kb._module_tier(n.module, n.path, e.target_modules) AS tier
            FROM kb.graph_node n
           WHERE e.kind <> 'imports' AND n.index_id = e.index_id AND n.kb_id = e.kb_id
             AND n.name = e.target_name
             AND n.graph = 'code' AND n.kind = ANY (kb._graph_target_kinds(e.kind))
             AND n.document_id <> e.document_id
             AND kb._language_family(n.language) = kb._language_family(src.language)
          UNION ALL
          SELECT n.id, kb._module_tier(n.module, n.path, e.target_modules)
            FROM kb.graph_node n
           WHERE e.kind = 'imports' AND n.index_id = e.index_id AND n.kb_id = e.kb_id
             AND n.kind = 'file'
             AND n.graph = 'code' AND n.document_id <> e.document_id
             AND kb._language_family(n.language) = kb._language_family(src.language)
             AND (regexp_replace(n.module, '^.*/', '') = ANY (
                    ARRAY(SELECT regexp_replace(m, '^.*/', '') FROM unnest(e.target_modules) m))
                  OR n.name = ANY (
                    ARRAY(SELECT regexp_replace(m, '^.*/', '') FROM unnest(e.target_modules) m)))
        ) q
      ) r
      -- A super() call names a base's member: only a base's module may hold it.
      WHERE r.tier = r.best AND (e.kind <> 'imports' OR r.tier < 1000)
        AND (e.qualifier IS DISTINCT FROM 'super' OR r.tier < 1000)
    ) c ON true
   WHERE e.id = ANY (v_edges) AND e.kb_id = p_kb_id AND e.target_id IS NULL;
END
$$;
COMMENT ON FUNCTION kb._graph_edges(integer, bigint, bigint[], text[]) IS
  'Internal: the edges of an index generation''s knowledge graph with every reference '
  'resolved (structure, same_file, import, name_only, external), optionally only those from '
  'some vertices or to targets of some names.';

CREATE OR REPLACE FUNCTION kb._entity_peers(p_kb_id integer, p_index_id bigint, p_ids bigint[])
RETURNS TABLE (source_id bigint, peer_id bigint)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- The same entity in other documents (or under a merged key): one canonical key, the
  -- entity's own unless a decision merged it into another's. A repository's vertices (one
  -- per file) are one by name the same way.
  WITH s AS (
    SELECT n.id, n.kind, coalesce(m.other_key, n.qualified_name) AS canonical
      FROM kb.graph_node n
      LEFT JOIN kb.graph_entity_merge m
        ON m.index_id = n.index_id AND m.kb_id = n.kb_id AND m.key = n.qualified_name AND m.merged
     WHERE n.id = ANY (p_ids) AND n.kb_id = p_kb_id AND n.kind IN ('entity', 'repository')
  )
  SELECT s.id, o.id
    FROM s
    JOIN kb.graph_node o
      ON o.index_id = p_index_id AND o.kb_id = p_kb_id AND o.kind = s.kind AND o.id <> s.id
     AND o.qualified_name IN (SELECT s.canonical
                              UNION ALL
                              SELECT m.key FROM kb.graph_entity_merge m
                               WHERE m.index_id = p_index_id AND m.kb_id = p_kb_id
                                 AND m.other_key = s.canonical
                                 AND m.merged)
$$;
COMMENT ON FUNCTION kb._entity_peers(integer, bigint, bigint[]) IS
  'Internal: for entity vertices, the vertices of the same entity in other documents and '
  'under keys merged into it; for a repository vertex, those of its other files.';

CREATE OR REPLACE FUNCTION kb._vertex_label(n kb.graph_node) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT CASE WHEN n.kind = 'entity' THEN n.name ELSE n.qualified_name END $$;
COMMENT ON FUNCTION kb._vertex_label(kb.graph_node) IS
  'Internal: how a vertex is shown: its qualified name, an entity its name (not its key).';

CREATE OR REPLACE FUNCTION kb._graph_index(kb_name text) RETURNS kb.kb_index
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index := kb._active_index(kb._get_kb(kb_name));
BEGIN
  IF NOT coalesce((v_ix.indexing_config->'knowledge_graph'->>'enabled')::boolean, false) THEN
    RAISE EXCEPTION 'knowledge base "%" has no knowledge graph', kb_name
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'turn it on with kb.reindex_knowledge_base(kb, indexing_config => '
                   '''{"knowledge_graph": {"enabled": true}}'') (a reindex)';
  END IF;
  RETURN v_ix;
END
$$;
COMMENT ON FUNCTION kb._graph_index(text) IS
  'Internal: the serving index generation (its id and kb_id) of a KB whose knowledge graph '
  'is on, or an error.';

CREATE OR REPLACE FUNCTION kb._graph_symbol(p_kb_id integer, p_index_id bigint, p_symbol text,
                                            p_kinds text[] DEFAULT NULL)
RETURNS SETOF kb.graph_node
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_name text;
BEGIN
  IF coalesce(btrim(p_symbol), '') = '' THEN
    RAISE EXCEPTION 'symbol must name a definition (a name like area, or a qualified name '
                    'like shapes.circle.Circle.area)' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- By qualified name, or its last parts (Circle.area), or the bare name.
  v_name := regexp_replace(p_symbol, '^.*(\.|::)', '');
  RETURN QUERY
  SELECT n.* FROM kb.graph_node n
   WHERE n.index_id = p_index_id AND n.kb_id = p_kb_id AND n.graph = 'code'
     AND n.kind NOT IN ('file', 'repository') AND n.name = v_name
     AND (p_kinds IS NULL OR n.kind = ANY (p_kinds))
     AND (p_symbol = v_name OR n.qualified_name = replace(p_symbol, '::', '.')
          OR right(n.qualified_name, length(p_symbol) + 1) = '.' || replace(p_symbol, '::', '.'))
   ORDER BY n.path, n.start_line;
END
$$;
COMMENT ON FUNCTION kb._graph_symbol(integer, bigint, text, text[]) IS
  'Internal: the definitions a symbol names: by qualified name, its last parts, or its name.';

CREATE OR REPLACE FUNCTION kb.graph_definitions(kb text, symbol text)
RETURNS TABLE (kind text, name text, qualified_name text, path text, start_line integer,
               end_line integer, language text, member_of text, signature text,
               document_id bigint, chunk_id bigint)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT n.kind, n.name, n.qualified_name, n.path, n.start_line, n.end_line, n.language,
         n.member_of, n.properties->>'signature', n.document_id, n.chunk_id
  FROM kb._graph_index(graph_definitions.kb) ix,
       kb._graph_symbol(ix.kb_id, ix.id, graph_definitions.symbol) n
$$;
COMMENT ON FUNCTION kb.graph_definitions(text, text) IS
  'Where a symbol is defined: every function, method, class, interface, struct, enum, trait '
  'or impl of that name (or qualified name, or its last parts: Circle.area), with file, lines, '
  'language and the chunk holding it. SELECT * FROM kb.graph_definitions(''code'', ''area'').';

CREATE OR REPLACE FUNCTION kb.graph_members(kb text, class_name text)
RETURNS TABLE (class text, kind text, name text, qualified_name text, path text,
               start_line integer, end_line integer, chunk_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index := kb._graph_index(graph_members.kb);
BEGIN
  RETURN QUERY
  WITH cls AS (
    SELECT c.* FROM kb._graph_symbol(v_ix.kb_id, v_ix.id, class_name,
                                     ARRAY['class', 'interface', 'struct', 'enum', 'trait', 'impl']) c
  )
  -- What each class defines; and methods defined apart from their class (C++'s
  -- Circle::area in a .cpp, Go's methods, Rust's impl blocks) that name it.
  SELECT cls.qualified_name, m.kind, m.name, m.qualified_name, m.path, m.start_line,
         m.end_line, m.chunk_id
    FROM cls
    JOIN kb.graph_edge e ON e.source_id = cls.id AND e.kb_id = v_ix.kb_id AND e.kind = 'defines'
    JOIN kb.graph_node m ON m.id = e.target_id AND m.kb_id = v_ix.kb_id
  UNION
  SELECT cls.qualified_name, m.kind, m.name, m.qualified_name, m.path, m.start_line,
         m.end_line, m.chunk_id
    FROM cls JOIN kb.graph_node m
      ON m.index_id = cls.index_id AND m.kb_id = v_ix.kb_id AND m.member_of = cls.name
     AND m.kind = 'method' AND m.graph = 'code'
     AND NOT EXISTS (SELECT 1 FROM kb.graph_edge d
                      JOIN kb.graph_node o ON o.id = d.source_id AND o.kb_id = d.kb_id
                     WHERE d.target_id = m.id AND d.kb_id = v_ix.kb_id AND d.kind = 'defines'
                       AND o.kind <> 'file')
     AND (cls.kind <> 'impl' OR m.document_id = cls.document_id)
  ORDER BY 1, 5, 6;
END
$$;
COMMENT ON FUNCTION kb.graph_members(text, text) IS
  'The members of a class (interface, struct, trait, impl): what it defines, plus methods '
  'defined outside its body that belong to it. SELECT * FROM kb.graph_members(''code'', ''Circle'').';

CREATE OR REPLACE FUNCTION kb._graph_reference_rows(p_kb_id integer, p_index_id bigint,
                                                    p_kinds text[], p_symbol text,
                                                    p_incoming boolean)
RETURNS TABLE (source text, source_kind text, source_path text, line integer, target text,
               target_kind text, target_path text, kind text, confidence real,
               resolution text, chunk_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_nodes bigint[];
  v_names text[];
BEGIN
  SELECT array_agg(n.id), array_agg(DISTINCT n.name) INTO v_nodes, v_names
    FROM kb._graph_symbol(p_kb_id, p_index_id, p_symbol) n;
  IF v_nodes IS NULL THEN
    RETURN;
  END IF;
  RETURN QUERY
  SELECT s.qualified_name, s.kind, s.path, e.line, coalesce(t.qualified_name, e.target_name),
         t.kind, t.path, e.kind, e.confidence, e.resolution,
         CASE WHEN p_incoming THEN s.chunk_id ELSE t.chunk_id END
    FROM kb._graph_edges(p_kb_id, p_index_id,
                         CASE WHEN p_incoming THEN NULL ELSE v_nodes END,
                         CASE WHEN p_incoming THEN v_names END) e
    JOIN kb.graph_node s ON s.id = e.source_id AND s.kb_id = p_kb_id
    LEFT JOIN kb.graph_node t ON t.id = e.target_id AND t.kb_id = p_kb_id
   WHERE e.kind = ANY (p_kinds)
     AND (NOT p_incoming OR e.target_id = ANY (v_nodes))
   ORDER BY e.confidence DESC NULLS LAST, s.path, e.line;
END
$$;
COMMENT ON FUNCTION kb._graph_reference_rows(integer, bigint, text[], text, boolean) IS
  'Internal: the references of some kinds made to (incoming) or by a symbol''s definitions.';

CREATE OR REPLACE FUNCTION kb.graph_callers(kb text, symbol text)
RETURNS TABLE (caller text, caller_kind text, path text, line integer, callee text,
               confidence real, resolution text, chunk_id bigint)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT r.source, r.source_kind, r.source_path, r.line, r.target, r.confidence, r.resolution,
         r.chunk_id
  FROM kb._graph_index(graph_callers.kb) ix,
       kb._graph_reference_rows(ix.kb_id, ix.id, ARRAY['calls'], graph_callers.symbol, true) r
$$;
COMMENT ON FUNCTION kb.graph_callers(text, text) IS
  'Who calls a symbol: each calling function or method with its file and line, how the call '
  'was resolved (same_file, import, name_only) and the confidence. '
  'SELECT * FROM kb.graph_callers(''code'', ''square'').';

CREATE OR REPLACE FUNCTION kb.graph_callees(kb text, symbol text)
RETURNS TABLE (caller text, line integer, callee text, callee_kind text, path text,
               confidence real, resolution text, chunk_id bigint)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT r.source, r.line, r.target, r.target_kind, r.target_path, r.confidence, r.resolution,
         r.chunk_id
  FROM kb._graph_index(graph_callees.kb) ix,
       kb._graph_reference_rows(ix.kb_id, ix.id, ARRAY['calls'], graph_callees.symbol, false) r
$$;
COMMENT ON FUNCTION kb.graph_callees(text, text) IS
  'What a symbol calls: each callee as defined in the KB (path NULL and resolution external '
  'for a library or builtin), with line, resolution and confidence.';

CREATE OR REPLACE FUNCTION kb.graph_subclasses(kb text, class_name text,
                                               transitive boolean DEFAULT true)
RETURNS TABLE (class text, kind text, path text, line integer, relation text, base text,
               depth integer, confidence real, resolution text, chunk_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index := kb._graph_index(graph_subclasses.kb);
  v_frontier bigint[];
  v_seen bigint[];
  v_depth integer := 0;
  v_ids bigint[];
  v_to bigint[];
  v_edges bigint[];
  v_conf real[];
  v_res text[];
BEGIN
  SELECT array_agg(n.id) INTO v_frontier
    FROM kb._graph_symbol(v_ix.kb_id, v_ix.id, class_name,
                          ARRAY['class', 'interface', 'struct', 'trait']) n;
  v_seen := coalesce(v_frontier, '{}');
  -- Breadth first, each class once (inheritance cycles in broken code end here), 20 levels.
  WHILE v_frontier IS NOT NULL AND v_depth < CASE WHEN transitive THEN 20 ELSE 1 END LOOP
    v_depth := v_depth + 1;
    SELECT array_agg(e.source_id), array_agg(e.target_id), array_agg(e.edge_id),
           array_agg(e.confidence), array_agg(e.resolution)
      INTO v_ids, v_to, v_edges, v_conf, v_res
      FROM kb._graph_edges(v_ix.kb_id, v_ix.id, NULL,
                           ARRAY(SELECT n.name FROM kb.graph_node n
                                  WHERE n.id = ANY (v_frontier) AND n.kb_id = v_ix.kb_id)) e
     WHERE e.kind IN ('inherits', 'implements') AND e.target_id = ANY (v_frontier)
       AND NOT e.source_id = ANY (v_seen);
    RETURN QUERY
    SELECT s.qualified_name, s.kind, s.path, g.line, g.kind, t.qualified_name, v_depth,
           u.confidence, u.resolution, s.chunk_id
      FROM unnest(v_ids, v_to, v_edges, v_conf, v_res)
           AS u(src, dst, edge, confidence, resolution)
      JOIN kb.graph_edge g ON g.id = u.edge AND g.kb_id = v_ix.kb_id
      JOIN kb.graph_node s ON s.id = u.src AND s.kb_id = v_ix.kb_id
      JOIN kb.graph_node t ON t.id = u.dst AND t.kb_id = v_ix.kb_id
     ORDER BY s.path, g.line;
    SELECT array_agg(DISTINCT i) INTO v_frontier FROM unnest(v_ids) i;
    v_seen := v_seen || coalesce(v_frontier, '{}');
  END LOOP;
END
$$;
COMMENT ON FUNCTION kb.graph_subclasses(text, text, boolean) IS
  'The classes that inherit from or implement a class, interface or trait, with depth (1: '
  'direct) and the base each names; transitive => false stops at the direct ones.';

CREATE OR REPLACE FUNCTION kb.graph_imports(kb text, file_path text)
RETURNS TABLE (path text, line integer, import text, resolved_path text, resolution text,
               confidence real)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index := kb._graph_index(graph_imports.kb);
BEGIN
  RETURN QUERY
  WITH f AS (
    SELECT n.id, n.path FROM kb.graph_node n
     WHERE n.index_id = v_ix.id AND n.kb_id = v_ix.kb_id AND n.kind = 'file'
       AND (n.path = file_path OR right(n.path, length(file_path) + 1) = '/' || file_path)
  )
  SELECT f.path, e.line, e.target_name, t.path, e.resolution, e.confidence
    FROM f CROSS JOIN LATERAL kb._graph_edges(v_ix.kb_id, v_ix.id, ARRAY[f.id]) e
    LEFT JOIN kb.graph_node t ON t.id = e.target_id AND t.kb_id = v_ix.kb_id
   WHERE e.kind = 'imports'
   ORDER BY f.path, e.line, t.path;
END
$$;
COMMENT ON FUNCTION kb.graph_imports(text, text) IS
  'What a source file imports (by its path, or its last parts): each import as written, the '
  'file of this KB it resolves to (NULL for a library: resolution external).';

CREATE OR REPLACE FUNCTION kb.graph_heading_tree(kb text, document text)
RETURNS TABLE (level integer, heading text, heading_path text, line integer, chunk_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index := kb._graph_index(graph_heading_tree.kb);
BEGIN
  RETURN QUERY
  SELECT (n.properties->>'level')::integer, n.name, n.qualified_name, n.start_line, n.chunk_id
    FROM kb.graph_node n
    JOIN kb.document d ON d.id = n.document_id AND d.kb_id = n.kb_id
   WHERE n.index_id = v_ix.id AND n.kb_id = v_ix.kb_id AND n.graph = 'heading'
     AND (d.title = graph_heading_tree.document OR d.source_uri = graph_heading_tree.document)
   ORDER BY n.local_id;
END
$$;
COMMENT ON FUNCTION kb.graph_heading_tree(text, text) IS
  'A Markdown document''s headings in order (by title or source_uri), outside fenced code, '
  'with level, path and the chunk each opens.';

CREATE OR REPLACE FUNCTION kb.graph_neighbours(kb text, name text, hops integer DEFAULT 1,
                                               max_vertices integer DEFAULT 100)
RETURNS TABLE (vertex text, kind text, graph text, path text, depth integer, via text,
               from_vertex text, direction text, chunk_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index := kb._graph_index(graph_neighbours.kb);
  v_frontier bigint[];
  v_seen bigint[];
  v_depth integer := 0;
  v_left integer;
  v_ids bigint[];
  v_from bigint[];
  v_via text[];
  v_dir text[];
  v_src bigint[];
BEGIN
  IF hops IS NULL OR hops NOT BETWEEN 1 AND 5 THEN
    RAISE EXCEPTION 'hops must be between 1 and 5 (got %)', coalesce(hops::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_vertices IS NULL OR max_vertices NOT BETWEEN 1 AND 10000 THEN
    RAISE EXCEPTION 'max_vertices must be between 1 and 10000 (got %)',
                    coalesce(max_vertices::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF coalesce(btrim(name), '') = '' THEN
    RAISE EXCEPTION 'name must name a vertex (a symbol, heading or file)'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT array_agg(n.id) INTO v_frontier FROM kb.graph_node n
   WHERE n.index_id = v_ix.id AND n.kb_id = v_ix.kb_id AND n.kind NOT IN ('chunk')
     AND (lower(n.name) = lower(graph_neighbours.name) OR n.qualified_name = graph_neighbours.name
          OR (n.kind = 'file' AND n.path = graph_neighbours.name));
  v_seen := coalesce(v_frontier, '{}');
  v_left := max_vertices;
  WHILE v_frontier IS NOT NULL AND v_depth < hops AND v_left > 0 LOOP
    v_depth := v_depth + 1;
    -- An entity's edges in every document it appears in are its own.
    v_src := v_frontier || ARRAY(SELECT p.peer_id FROM kb._entity_peers(v_ix.kb_id, v_ix.id, v_frontier) p);
    SELECT array_agg(x.other), array_agg(x.here), array_agg(x.kind), array_agg(x.direction)
      INTO v_ids, v_from, v_via, v_dir
      FROM (
        SELECT DISTINCT ON (y.other) y.* FROM (
          SELECT p.peer_id AS other, p.source_id AS here, 'same entity' AS kind,
                 'out' AS direction
            FROM kb._entity_peers(v_ix.kb_id, v_ix.id, v_frontier) p
          UNION ALL
          SELECT e.target_id, e.source_id, coalesce(e.label, e.kind), 'out'
            FROM kb._graph_edges(v_ix.kb_id, v_ix.id, v_src) e WHERE e.target_id IS NOT NULL
          UNION ALL
          SELECT e.source_id, e.target_id, coalesce(e.label, e.kind), 'in'
            FROM kb._graph_edges(v_ix.kb_id, v_ix.id, NULL,
                                 ARRAY(SELECT n.name FROM kb.graph_node n
                                        WHERE n.id = ANY (v_src) AND n.kb_id = v_ix.kb_id)) e
           WHERE e.target_id = ANY (v_src)
        ) y
        WHERE NOT y.other = ANY (v_seen)
        ORDER BY y.other, y.direction DESC
        LIMIT v_left
      ) x;
    RETURN QUERY
    SELECT kb._vertex_label(n), n.kind, n.graph, n.path, v_depth, s.via, kb._vertex_label(f),
           s.dir, n.chunk_id
      FROM unnest(v_ids, v_from, v_via, v_dir) AS s(id, vertex, via, dir)
      JOIN kb.graph_node n ON n.id = s.id AND n.kb_id = v_ix.kb_id
      JOIN kb.graph_node f ON f.id = s.vertex AND f.kb_id = v_ix.kb_id
     ORDER BY n.path, n.start_line NULLS FIRST, n.qualified_name;
    v_frontier := v_ids;
    v_seen := v_seen || coalesce(v_frontier, '{}');
    v_left := v_left - coalesce(cardinality(v_frontier), 0);
  END LOOP;
END
$$;
COMMENT ON FUNCTION kb.graph_neighbours(text, text, integer, integer) IS
  'The vertices within some hops (1 to 5) of a named vertex (a symbol, heading, file path), '
  'each once (cycle-safe), at most max_vertices: the edge kind that reached it (via), from '
  'which vertex, and whether that edge points out of or into it.';

CREATE OR REPLACE VIEW kb.graph_edges WITH (security_invoker = true) AS
  SELECT k.name AS kb, s.graph, s.kind AS source_kind, kb._vertex_label(s) AS source,
         s.path AS source_path, e.kind, coalesce(kb._vertex_label(t), e.target_name) AS target,
         t.kind AS target_kind, t.path AS target_path, e.line, e.confidence, e.resolution,
         e.label, e.chunk_id, k.id AS kb_id
  FROM kb.knowledge_base k
  CROSS JOIN LATERAL kb._graph_edges(k.id, k.active_index_id) e
  JOIN kb.graph_node s ON s.kb_id = k.id AND s.id = e.source_id
  LEFT JOIN kb.graph_node t ON t.kb_id = k.id AND t.id = e.target_id;
COMMENT ON VIEW kb.graph_edges IS
  'Every edge of the serving knowledge graphs, references resolved: filter by kb (and kind) '
  'for one graph. Code edges read: source (qualified name) kind target.';
GRANT SELECT ON kb.graph_edges TO PUBLIC;

CREATE OR REPLACE FUNCTION kb._graph_channel(p_kb_id integer, p_index_id bigint, p_query text,
                                             p_limit integer, p_hops integer,
                                             p_filter jsonb DEFAULT NULL,
                                             p_embedding real[] DEFAULT NULL)
RETURNS TABLE (chunk_id bigint, rank integer, path text)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_terms text[];
  v_ident text[];
  v_words text[];
  v_ids bigint[];
  v_from bigint[];
  v_via text[];
  v_depth integer := 0;
  v_frontier bigint[];
  v_src bigint[];
BEGIN
  -- The words and identifiers of the query (dotted and :: names whole and by last part),
  -- without stop words: what a vertex's name may equal (v_terms). Of those, the
  -- identifier-shaped ones (v_ident): with _ or a digit, dotted or ::, in `code`, or with
  -- a capital after the first letter (getValue, HTTPServer). A plain word ("message")
  -- names a definition only written in its case ("Message"), and then below one written
  -- as code: prose is full of words that are also class names. (A `code` word is also
  -- one of the first pattern's words, so it adds nothing to v_terms.)
  SELECT coalesce(array_agg(DISTINCT lower(x.w)) FILTER (
           WHERE length(x.w) >= 3 AND ts_lexize('english_stem', lower(x.w)) <> '{}'), '{}'),
         coalesce(array_agg(DISTINCT lower(x.w)) FILTER (WHERE x.ident), '{}')
    INTO v_terms, v_ident
    FROM (
      SELECT m[1] AS w, m[1] ~ '[_$0-9]|\.|::|^.+[A-Z]' AS ident FROM regexp_matches(p_query,
             '([A-Za-z_$][A-Za-z0-9_$]*(?:(?:\.|::)[A-Za-z_$][A-Za-z0-9_$]*)*)', 'g') AS m
      UNION ALL
      SELECT regexp_replace(m[1], '^.*(\.|::)', ''), true FROM regexp_matches(p_query,
             '([A-Za-z_$][A-Za-z0-9_$]*(?:(?:\.|::)[A-Za-z_$][A-Za-z0-9_$]*)+)', 'g') AS m
      UNION ALL
      SELECT m[1], true FROM regexp_matches(p_query, '`([A-Za-z_$][A-Za-z0-9_$]*)`', 'g') AS m
    ) x;
  v_words := ARRAY(SELECT m[1] FROM regexp_matches(p_query, '([A-Za-z_$][A-Za-z0-9_$]*)', 'g') AS m);
  -- Seeds: definitions and files the query names, headings whose title it contains.
  -- Scored by how exactly they match: the same case, a definition, a qualified name.
  SELECT array_agg(s.id ORDER BY s.score DESC, s.id), array_agg(s.id ORDER BY s.score DESC, s.id),
         array_agg(''::text ORDER BY s.score DESC, s.id)
    INTO v_ids, v_from, v_via
    FROM (
      SELECT n.id,
             CASE WHEN n.kind IN ('file', 'repository') THEN 1 ELSE 2 END
             + CASE WHEN position(n.name in p_query) > 0 THEN 1 ELSE 0 END
             + CASE WHEN position(lower(n.qualified_name) in lower(p_query)) > 0
                         AND n.qualified_name <> n.name THEN 1 ELSE 0 END
             - CASE WHEN lower(n.name) = ANY (v_ident) THEN 0 ELSE 2 END AS score
        FROM kb.graph_node n
       WHERE n.index_id = p_index_id AND n.kb_id = p_kb_id AND n.graph = 'code'
         AND lower(n.name) = ANY (v_terms)
         AND (lower(n.name) = ANY (v_ident) OR n.name = ANY (v_words))
      UNION ALL
      SELECT n.id, 1.5 + CASE WHEN position(n.name in p_query) > 0 THEN 1 ELSE 0 END
        FROM kb.graph_node n
       WHERE n.index_id = p_index_id AND n.kb_id = p_kb_id AND n.graph = 'heading'
         AND length(n.name) >= 4
         AND position(lower(n.name) in lower(p_query)) > 0
      UNION ALL
      -- Entities the query names (a word, or a name of several words it contains).
      SELECT n.id, 2 + CASE WHEN position(n.name in p_query) > 0 THEN 1 ELSE 0 END
        FROM kb.graph_node n
       WHERE n.index_id = p_index_id AND n.kb_id = p_kb_id AND n.graph = 'triplets'
         AND (lower(n.name) = ANY (v_terms)
              OR (length(n.name) >= 4 AND n.name ~ '\s'
                  AND position(lower(n.name) in lower(p_query)) > 0))
      UNION ALL
      -- And the entities whose name is nearest the query by vector (the query's own
      -- embedding), when close enough: a paraphrase finds them too.
      SELECT v.id, 1 + v.sim FROM (
        SELECT n.id, 1 - (n.embedding <=> p_embedding::vector) AS sim
          FROM kb.graph_node n
         WHERE p_embedding IS NOT NULL AND n.index_id = p_index_id AND n.kb_id = p_kb_id
           AND n.kind = 'entity'
           AND n.embedding IS NOT NULL
         ORDER BY n.embedding <=> p_embedding::vector
         LIMIT 5
      ) v WHERE v.sim >= 0.6
      ORDER BY 2 DESC, 1
      LIMIT p_limit
    ) s;
  v_frontier := v_ids;
  -- Breadth first from the seeds, each vertex once, within p_limit vertices: what they
  -- define and contain first, then their bases, then calls either way, then imports.
  WHILE v_frontier IS NOT NULL AND v_depth < p_hops AND cardinality(v_ids) < p_limit LOOP
    v_depth := v_depth + 1;
    v_src := v_frontier || ARRAY(SELECT p.peer_id FROM kb._entity_peers(p_kb_id, p_index_id, v_frontier) p);
    SELECT v_ids || array_agg(x.other ORDER BY x.prio, x.conf DESC, x.other),
           v_from || array_agg(x.here ORDER BY x.prio, x.conf DESC, x.other),
           v_via || array_agg(x.via ORDER BY x.prio, x.conf DESC, x.other),
           array_agg(x.other)
      INTO v_ids, v_from, v_via, v_frontier
      FROM (
        SELECT DISTINCT ON (y.other) y.* FROM (
          SELECT p.peer_id AS other, p.source_id AS here, 'same entity' AS via,
                 1::real AS conf, 0 AS prio
            FROM kb._entity_peers(p_kb_id, p_index_id, v_frontier) p
          UNION ALL
          SELECT e.target_id, e.source_id, coalesce(e.label, e.kind), e.confidence,
                 CASE e.kind WHEN 'defines' THEN 0 WHEN 'contains' THEN 0
                             WHEN 'inherits' THEN 1 WHEN 'implements' THEN 1
                             WHEN 'relation' THEN 1 WHEN 'calls' THEN 2 ELSE 3 END
            FROM kb._graph_edges(p_kb_id, p_index_id, v_src) e
           WHERE e.target_id IS NOT NULL AND e.kind NOT IN ('include', 'next')
          UNION ALL
          SELECT e.source_id, e.target_id, coalesce(e.label, e.kind) || ' (in)', e.confidence,
                 CASE e.kind WHEN 'inherits' THEN 1 WHEN 'implements' THEN 1
                             WHEN 'relation' THEN 1 WHEN 'calls' THEN 2 ELSE 4 END
            FROM kb._graph_edges(p_kb_id, p_index_id, NULL,
                                 ARRAY(SELECT n.name FROM kb.graph_node n
                                        WHERE n.id = ANY (v_src) AND n.kb_id = p_kb_id)) e
           WHERE e.target_id = ANY (v_src)
             AND e.kind IN ('calls', 'inherits', 'implements', 'relation')
        ) y
        JOIN kb.graph_node o ON o.id = y.other AND o.kb_id = p_kb_id
                            AND o.kind NOT IN ('document', 'chunk')
        WHERE NOT y.other = ANY (v_ids)
        ORDER BY y.other, y.prio, y.conf DESC
      ) x;
    -- Stay within the limit.
    v_ids := v_ids[1:p_limit];
  END LOOP;
  -- Each vertex's chunk, in the order reached; a chunk once, at its best place.
  RETURN QUERY
  SELECT q.chunk_id, (row_number() OVER (ORDER BY q.pos))::integer, q.path
    FROM (
      SELECT DISTINCT ON (n.chunk_id) n.chunk_id, u.pos,
             CASE WHEN u.via = '' THEN 'names ' || kb._vertex_label(n)
                  ELSE kb._vertex_label(f) || ' -' || u.via || '-> '
                       || kb._vertex_label(n) END AS path
        FROM unnest(v_ids, v_from, v_via) WITH ORDINALITY AS u(id, src, via, pos)
        JOIN kb.graph_node n ON n.id = u.id AND n.kb_id = p_kb_id
        JOIN kb.graph_node f ON f.id = u.src AND f.kb_id = p_kb_id
        JOIN kb.chunk c ON c.id = n.chunk_id AND c.kb_id = p_kb_id
       WHERE n.chunk_id IS NOT NULL AND (p_filter IS NULL OR c.metadata @> p_filter)
       ORDER BY n.chunk_id, u.pos
    ) q
   ORDER BY q.pos
   LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION kb._graph_channel(integer, bigint, text, integer, integer, jsonb, real[]) IS
  'Internal: the knowledge-graph channel of a hybrid search: the vertices the query names '
  '(definitions, files and entities by name, headings it quotes, entities nearest the query '
  'vector), then their neighbours within p_hops '
  '(members, bases, calls either way, imports; each vertex once), as the chunks holding them '
  'in that order, each with the path that reached it.';

CREATE OR REPLACE FUNCTION kb.graph_entities(kb text, name text)
RETURNS TABLE (entity text, type text, key text, names text[], documents bigint,
               mentions bigint, merged_from text[])
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index := kb._graph_index(graph_entities.kb);
BEGIN
  RETURN QUERY
  WITH hit AS (
    SELECT coalesce(m.other_key, n.qualified_name) AS canonical
      FROM kb.graph_node n
      LEFT JOIN kb.graph_entity_merge m
        ON m.index_id = n.index_id AND m.kb_id = n.kb_id AND m.key = n.qualified_name
       AND m.merged
     WHERE n.index_id = v_ix.id AND n.kb_id = v_ix.kb_id AND n.kind = 'entity'
       AND (lower(n.name) = lower(btrim(graph_entities.name))
            OR split_part(n.qualified_name, '|', 1) = lower(btrim(graph_entities.name))
            OR lower(btrim(graph_entities.name)) IN (SELECT lower(a)
                                      FROM jsonb_array_elements_text(n.properties->'aliases') a))
  ),
  members AS (
    SELECT DISTINCT h.canonical, n.*
      FROM hit h JOIN kb.graph_node n ON n.kind = 'entity'
       AND (n.qualified_name = h.canonical
            OR n.qualified_name IN (SELECT m.key FROM kb.graph_entity_merge m
                                     WHERE m.other_key = h.canonical AND m.merged
                                       AND m.index_id = v_ix.id AND m.kb_id = v_ix.kb_id))
     WHERE n.index_id = v_ix.id AND n.kb_id = v_ix.kb_id
  )
  SELECT (array_agg(m.name ORDER BY m.qualified_name = m.canonical DESC, m.id))[1],
         (array_agg(m.properties->>'type' ORDER BY m.qualified_name = m.canonical DESC, m.id))[1],
         m.canonical,
         ARRAY(SELECT DISTINCT x FROM members m2,
                 LATERAL (SELECT m2.name UNION ALL
                          SELECT jsonb_array_elements_text(m2.properties->'aliases')) AS a(x)
                WHERE m2.canonical = m.canonical ORDER BY 1),
         count(DISTINCT m.document_id), sum((m.properties->>'mentions')::bigint)::bigint,
         ARRAY(SELECT DISTINCT m3.qualified_name FROM members m3
                WHERE m3.canonical = m.canonical AND m3.qualified_name <> m.canonical ORDER BY 1)
    FROM members m
   GROUP BY m.canonical
   ORDER BY 6 DESC, 3;
END
$$;
COMMENT ON FUNCTION kb.graph_entities(text, text) IS
  'The entities of the triplet graph a name refers to (by name, folded name or alias): each '
  'merged entity once, with its type, merge key, every name it was written as, the documents '
  'and mentions, and the keys merged into it (kb.graph_entity_merge says why).';

CREATE OR REPLACE FUNCTION kb.graph_relations(kb text, entity text)
RETURNS TABLE (subject text, predicate text, object text, document text, chunk_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index := kb._graph_index(graph_relations.kb);
  v_own bigint[];
BEGIN
  SELECT array_agg(n.id) INTO v_own FROM kb.graph_node n
   WHERE n.index_id = v_ix.id AND n.kb_id = v_ix.kb_id AND n.kind = 'entity'
     AND (lower(n.name) = lower(btrim(entity))
          OR split_part(n.qualified_name, '|', 1) = lower(btrim(entity))
          OR lower(btrim(entity)) IN (SELECT lower(a)
                                       FROM jsonb_array_elements_text(n.properties->'aliases') a));
  -- The same entity in the other documents it appears in, and under merged keys.
  v_own := v_own || ARRAY(SELECT p.peer_id FROM kb._entity_peers(v_ix.kb_id, v_ix.id, v_own) p);
  RETURN QUERY
  SELECT s.name, e.label, t.name, d.title, e.chunk_id
    FROM kb.graph_edge e
    JOIN kb.graph_node s ON s.id = e.source_id AND s.kb_id = e.kb_id
    JOIN kb.graph_node t ON t.id = e.target_id AND t.kb_id = e.kb_id
    JOIN kb.document d ON d.id = e.document_id AND d.kb_id = e.kb_id
   WHERE e.index_id = v_ix.id AND e.kb_id = v_ix.kb_id AND e.kind = 'relation'
     AND (e.source_id = ANY (v_own) OR e.target_id = ANY (v_own))
   ORDER BY d.title, e.id;
END
$$;
COMMENT ON FUNCTION kb.graph_relations(text, text) IS
  'Every (subject, predicate, object) of the triplet graph that involves an entity (merged '
  'across documents), with the document and the chunk it was read from, to cite.';

CREATE OR REPLACE FUNCTION kb._communities_index(kb_name text, p_write boolean)
RETURNS kb.kb_index
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base := CASE WHEN p_write THEN kb._get_kb_for_write(kb_name)
                                 ELSE kb._get_kb(kb_name) END;
  v_ix kb.kb_index;
BEGIN
  v_ix := kb._active_index(v_kb);
  IF NOT coalesce((v_ix.indexing_config->'knowledge_graph'->>'communities')::boolean, false) THEN
    RAISE EXCEPTION 'knowledge base "%" has no knowledge-graph communities', kb_name
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'set knowledge_graph.communities (with the triplets graph) and reindex';
  END IF;
  RETURN v_ix;
END
$$;
COMMENT ON FUNCTION kb._communities_index(text, boolean) IS
  'Internal: the serving generation of a KB with knowledge-graph communities, or an error.';

CREATE OR REPLACE FUNCTION kb._py_refresh_communities(kb_id integer, index_id bigint,
                                                      indexing_config jsonb)
RETURNS jsonb
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.refresh_communities(plpy, kb_id, index_id, indexing_config)
$$;

CREATE OR REPLACE FUNCTION kb.refresh_communities(kb text)
RETURNS TABLE (communities integer, summarized integer, kept integer, removed integer)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index := kb._communities_index(refresh_communities.kb, true);
  v_res jsonb;
  v_removed integer;
BEGIN
  -- One refresh per generation at a time; the others wait for it.
  PERFORM pg_advisory_xact_lock(hashtext('kbpg_communities'), v_ix.id::integer);
  v_res := kb._py_refresh_communities(v_ix.kb_id, v_ix.id, v_ix.indexing_config);
  DELETE FROM kb.graph_community c
   WHERE c.kb_id = v_ix.kb_id AND c.index_id = v_ix.id
     AND NOT c.signature = ANY (ARRAY(SELECT jsonb_array_elements_text(v_res->'keep')));
  GET DIAGNOSTICS v_removed = ROW_COUNT;
  INSERT INTO kb.graph_community (index_id, kb_id, signature, members, names, relations, title,
                                  summary, embedding, tsv, chunk_ids)
  SELECT v_ix.id, v_ix.kb_id, c->>'signature',
         ARRAY(SELECT jsonb_array_elements_text(c->'members')),
         ARRAY(SELECT jsonb_array_elements_text(c->'names')), (c->>'relations')::integer,
         c->>'title', c->>'summary', (c->>'embedding')::vector,
         kb.text_tsvector(v_ix.indexing_config, (c->>'title') || E'\n\n' || (c->>'summary')),
         ARRAY(SELECT jsonb_array_elements_text(c->'chunk_ids')::bigint)
  FROM jsonb_array_elements(v_res->'new') c;
  INSERT INTO kb.graph_community_state AS s (index_id, kb_id, stale, refreshed_at, error)
  VALUES (v_ix.id, v_ix.kb_id, false, now(), NULL)
  ON CONFLICT (index_id, kb_id) DO UPDATE SET stale = false, refreshed_at = now(), error = NULL;
  RETURN QUERY SELECT jsonb_array_length(v_res->'keep'), jsonb_array_length(v_res->'new'),
                      jsonb_array_length(v_res->'keep') - jsonb_array_length(v_res->'new'),
                      v_removed;
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb.refresh_communities(text) IS
  'Brings a KB''s knowledge-graph communities up to date: detects them again over its merged '
  'entities and relations, keeps the summary of each whose relations did not change, has the '
  'LLM summarise new and changed ones (cached), removes those that are gone. The worker runs '
  'it for stale KBs when its queue is empty. Returns the counts.';

CREATE OR REPLACE FUNCTION kb.refresh_stale_communities()
RETURNS TABLE (kb text, communities integer, summarized integer, kept integer, removed integer,
               error text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_name text;
  v_kb integer;
  v_ix bigint;
BEGIN
  -- Which generations are stale is a question to every KB's rows; each refresh is one KB's.
  FOR v_name, v_kb, v_ix IN
    SELECT k.name, k.id, s.index_id FROM kb.graph_community_state s
      JOIN kb.knowledge_base k ON k.id = s.kb_id AND k.active_index_id = s.index_id
     WHERE s.stale ORDER BY s.index_id LOOP
    BEGIN
      RETURN QUERY SELECT v_name, r.communities, r.summarized, r.kept, r.removed, NULL::text
                     FROM kb.refresh_communities(v_name) r;
    EXCEPTION WHEN OTHERS THEN
      UPDATE kb.graph_community_state s SET error = left(SQLERRM, 2000)
       WHERE s.kb_id = v_kb AND s.index_id = v_ix;
      RETURN QUERY SELECT v_name, NULL::integer, NULL::integer, NULL::integer, NULL::integer,
                          SQLERRM;
    END;
  END LOOP;
END
$$;
COMMENT ON FUNCTION kb.refresh_stale_communities() IS
  'Refreshes the communities of every KB whose entities changed since their last refresh; '
  'a failure is recorded (graph_community_state.error) and the next KB goes on.';

CREATE OR REPLACE FUNCTION kb.graph_communities(kb text, query text DEFAULT NULL,
                                                top_k integer DEFAULT 5)
RETURNS TABLE (rank integer, title text, summary text, entities text[], relations integer,
               score double precision, chunk_ids bigint[])
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base := kb._get_kb(graph_communities.kb);
  v_ix kb.kb_index := kb._communities_index(graph_communities.kb, false);
  v_prep kb.prepared_query;
  v_terms tsquery;
BEGIN
  IF top_k IS NULL OR top_k NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'top_k must be between 1 and 1000 (got %)', coalesce(top_k::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF query IS NULL THEN
    -- No question: the communities by size, the corpus's main subjects first.
    RETURN QUERY
    SELECT (row_number() OVER (ORDER BY c.relations DESC, c.id))::integer, c.title, c.summary,
           c.names, c.relations, NULL::double precision, c.chunk_ids
      FROM kb.graph_community c WHERE c.index_id = v_ix.id AND c.kb_id = v_ix.kb_id
     ORDER BY c.relations DESC, c.id LIMIT top_k;
    RETURN;
  END IF;
  PERFORM kb._check_query(query);
  -- hybrid: a provider that cannot embed the query leaves the text rank to carry it.
  v_prep := kb._prepare_query(v_ix.indexing_config, v_kb.retrieval_config,
                              '{"method": "hybrid"}', query);
  v_terms := to_tsquery('simple', coalesce(nullif(array_to_string(ARRAY(
               SELECT quote_literal(l)
                 FROM unnest(kb._config_lexemes(v_ix.indexing_config, query)) l), ' | '),
               ''), 'kbpg_no_terms'));
  -- Ranked by the summaries' vectors, and by BM25-like text rank where there is no vector.
  RETURN QUERY
  SELECT (row_number() OVER (ORDER BY x.s DESC, x.id))::integer, x.title, x.summary, x.names,
         x.relations, x.s, x.chunk_ids
    FROM (
      SELECT c.*, CASE WHEN v_prep.embedding IS NOT NULL AND c.embedding IS NOT NULL
                       THEN 1 - (c.embedding <=> v_prep.embedding::vector)
                       ELSE ts_rank(c.tsv, v_terms) END AS s
        FROM kb.graph_community c WHERE c.index_id = v_ix.id AND c.kb_id = v_ix.kb_id
    ) x
   ORDER BY x.s DESC, x.id LIMIT top_k;
END
$$;
COMMENT ON FUNCTION kb.graph_communities(text, text, integer) IS
  'The knowledge graph''s community summaries for broad questions ("what is this corpus '
  'about"): ranked by how near each summary is to the query, or by size without one; each '
  'with its entities and the chunks its facts came from, to cite.';
