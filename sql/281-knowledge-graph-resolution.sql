-- The knowledge graph: resolving references across files (a call, import or base names a
-- vertex of another file, matched by kind, module and language family).

CREATE OR REPLACE FUNCTION kb._graph_target_kinds(p_kind text) RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- Generated from kbpg_db.code_graph.TARGET_KINDS when kbpg installs this file.
  SELECT CASE p_kind
           /*@target_kinds*/WHEN 'imports' THEN ARRAY['file']/*@*/
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
  -- Generated from kbpg_db.code_graph.LANGUAGE_FAMILIES when kbpg installs this file.
  SELECT CASE /*@language_families*/WHEN p_language IN ('c', 'cpp') THEN 'c'/*@*/
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
