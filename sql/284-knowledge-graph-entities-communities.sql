-- The knowledge graph's entities (the LLM triplet graph) and their communities: entity
-- and relation questions, community detection, summaries and search.

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
