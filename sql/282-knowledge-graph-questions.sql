-- The knowledge graph's direct questions: definitions, members, callers and callees,
-- subclasses, imports, heading trees, neighbours, and the kb.graph_edges view.

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
  IF kb._blank(p_symbol) THEN
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
  IF kb._blank(name) THEN
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
