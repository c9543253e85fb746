-- The knowledge graph's channel in hybrid search: the vertices a query names and their
-- neighbours, as chunks, fused beside the vector and BM25 lists (sql/420-search-fusion.sql).

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
