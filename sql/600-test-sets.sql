-- Test sets: saved queries with what they should find, scored over whole configurations
-- (kbpg lab's test-set page, or any SQL client). Metrics follow kbpg eval's definitions with
-- binary relevance: Success@k (an expected item in the top k), MRR@10, nDCG@10.

CREATE OR REPLACE FUNCTION kb.create_test_set(kb text, name text, description text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base := kb._get_kb_for_write(create_test_set.kb);
  v_id bigint;
BEGIN
  IF kb._blank(name) OR length(name) > 200 THEN
    RAISE EXCEPTION 'test set name must be 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF EXISTS (SELECT 1 FROM kb.test_set t WHERE t.kb_id = v_kb.id AND t.name = create_test_set.name) THEN
    RAISE EXCEPTION 'test set "%" already exists in knowledge base "%"', name, kb
      USING ERRCODE = 'duplicate_object';
  END IF;
  INSERT INTO kb.test_set (kb_id, name, description)
  VALUES (v_kb.id, name, coalesce(description, '')) RETURNING id INTO v_id;
  RETURN v_id;
END
$$;
COMMENT ON FUNCTION kb.create_test_set(text, text, text) IS
  'Creates an empty test set in a KB (write rights needed); returns its id.';

CREATE OR REPLACE FUNCTION kb._get_test_set(p_kb kb.knowledge_base, p_name text) RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_id bigint;
BEGIN
  SELECT t.id INTO v_id FROM kb.test_set t WHERE t.kb_id = p_kb.id AND t.name = p_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'test set "%" does not exist in knowledge base "%"', p_name, p_kb.name
      USING ERRCODE = 'no_data_found', HINT = 'kb.test_sets(kb) lists them';
  END IF;
  RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION kb.add_test_query(kb text, test_set text, query text, expected text[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb_for_write(add_test_query.kb);
  v_set bigint := kb._get_test_set(v_kb, test_set);
  v_id  bigint;
  v_missing text;
BEGIN
  IF kb._blank(query) THEN
    RAISE EXCEPTION 'a test query must not be empty' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF expected IS NULL OR cardinality(expected) = 0
     OR EXISTS (SELECT 1 FROM unnest(expected) e WHERE kb._blank(e)) THEN
    RAISE EXCEPTION 'test query "%" must name what it should find (document titles, or "title › section")', query
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- What it should find must be in the KB: a typo would score every run as a miss.
  SELECT e INTO v_missing FROM unnest(expected) e
   WHERE NOT EXISTS (SELECT 1 FROM kb.document d
                      WHERE d.kb_id = v_kb.id AND d.title = split_part(btrim(e), ' › ', 1))
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'test query "%" expects "%", which names no document of knowledge base "%"',
                    query, v_missing, v_kb.name
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'expected items are document titles, or sections written "title › heading"';
  END IF;
  INSERT INTO kb.test_query (kb_id, test_set_id, query, expected)
  VALUES (v_kb.id, v_set, query, expected) RETURNING id INTO v_id;
  RETURN v_id;
END
$$;
COMMENT ON FUNCTION kb.add_test_query(text, text, text, text[]) IS
  'Adds a query to a test set with what it should find: document titles, or sections '
  'written "title › heading › subheading", of documents in the KB (22023 otherwise).';

CREATE OR REPLACE FUNCTION kb.delete_test_set(kb text, name text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base := kb._get_kb_for_write(delete_test_set.kb);
BEGIN
  DELETE FROM kb.test_set t
   WHERE t.kb_id = v_kb.id AND t.id = kb._get_test_set(v_kb, delete_test_set.name);
  RETURN true;
END
$$;
COMMENT ON FUNCTION kb.delete_test_set(text, text) IS
  'Deletes a test set with its queries and runs.';

CREATE OR REPLACE FUNCTION kb.test_sets(kb text)
RETURNS TABLE (name text, description text, queries bigint, runs bigint,
               last_metrics jsonb, created_at timestamptz)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT t.name, t.description,
         (SELECT count(*) FROM kb.test_query q WHERE q.kb_id = t.kb_id AND q.test_set_id = t.id),
         (SELECT count(*) FROM kb.test_run r WHERE r.kb_id = t.kb_id AND r.test_set_id = t.id),
         (SELECT r.metrics FROM kb.test_run r WHERE r.kb_id = t.kb_id AND r.test_set_id = t.id
           ORDER BY r.id DESC LIMIT 1),
         t.created_at
  FROM kb.test_set t WHERE t.kb_id = (kb._get_kb(test_sets.kb)).id ORDER BY t.name
$$;
COMMENT ON FUNCTION kb.test_sets(text) IS
  'The test sets of a KB with their query and run counts and the last run''s metrics.';

CREATE OR REPLACE FUNCTION kb.score_query(kb text, query text, expected text[],
                                          options jsonb DEFAULT '{}')
RETURNS jsonb
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  WITH r AS (
    SELECT s.rank, s.title,
           s.title || coalesce(' › ' || nullif(array_to_string(s.heading_path, ' › '), ''), '') AS path
    FROM kb.search(score_query.kb, score_query.query,
                   options => coalesce(score_query.options, '{}')
                              || jsonb_build_object('top_k', greatest(10, coalesce(
                                   (score_query.options->>'top_k')::integer, 10)))) s
  ), hit AS (   -- each expected item at the best rank of a result in it
    SELECT e, min(r.rank) AS rank
    FROM unnest(score_query.expected) e
    LEFT JOIN r ON r.title = e OR r.path = e OR left(r.path, length(e) + 3) = e || ' › '
    GROUP BY e
  ), s AS (
    SELECT min(rank) AS first_rank,
           coalesce(sum(1 / log(2, rank + 1)) FILTER (WHERE rank <= 10), 0) AS dcg,
           (SELECT sum(1 / log(2, i + 1))
              FROM generate_series(1, least(cardinality(score_query.expected), 10)) i) AS ideal
    FROM hit
  )
  SELECT jsonb_build_object(
           'query', score_query.query, 'expected', to_jsonb(score_query.expected),
           'first_rank', s.first_rank,
           'success_at_1', (s.first_rank <= 1) IS TRUE,
           'success_at_5', (s.first_rank <= 5) IS TRUE,
           'rr', CASE WHEN s.first_rank <= 10 THEN 1.0 / s.first_rank ELSE 0 END,
           'ndcg', round((s.dcg / s.ideal)::numeric, 4),
           'found', (SELECT coalesce(jsonb_object_agg(e, rank), '{}') FROM hit),
           'top', (SELECT coalesce(jsonb_agg(r.path ORDER BY r.rank), '[]')
                     FROM r WHERE r.rank <= 5))
  FROM s
$$;
COMMENT ON FUNCTION kb.score_query(text, text, text[], jsonb) IS
  'One query scored against what it should find (titles or "title › section" paths) with '
  'retrieval options: first_rank, success_at_1/5, rr (reciprocal rank within 10), ndcg '
  '(@10), each expected item''s rank, and the top 5 results.';

CREATE OR REPLACE FUNCTION kb.run_test_set(kb text, test_set text, options jsonb DEFAULT '{}',
                                           save boolean DEFAULT true)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb      kb.knowledge_base := kb._get_kb(run_test_set.kb);
  v_set     bigint := kb._get_test_set(v_kb, test_set);
  v_queries jsonb;
  v_metrics jsonb;
  v_run     bigint;
BEGIN
  IF options IS NULL OR jsonb_typeof(options) <> 'object' THEN
    RAISE EXCEPTION 'options must be a JSON object of retrieval settings'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT coalesce(jsonb_agg(kb.score_query(run_test_set.kb, q.query, q.expected, options)
                            ORDER BY q.id), '[]')
    INTO v_queries
    FROM kb.test_query q WHERE q.kb_id = v_kb.id AND q.test_set_id = v_set;
  IF jsonb_array_length(v_queries) = 0 THEN
    RAISE EXCEPTION 'test set "%" has no queries', test_set
      USING ERRCODE = 'invalid_parameter_value', HINT = 'add some with kb.add_test_query';
  END IF;
  SELECT jsonb_build_object(
           'queries', count(*),
           'success_at_1', round(avg((x->>'success_at_1')::boolean::int), 4),
           'success_at_5', round(avg((x->>'success_at_5')::boolean::int), 4),
           'mrr_at_10', round(avg((x->>'rr')::numeric), 4),
           'ndcg_at_10', round(avg((x->>'ndcg')::numeric), 4),
           'failed', count(*) FILTER (WHERE NOT (x->>'success_at_5')::boolean))
    INTO v_metrics FROM jsonb_array_elements(v_queries) x;
  IF save AND kb._can_write(v_kb.id) THEN
    INSERT INTO kb.test_run (kb_id, test_set_id, config, metrics, queries)
    VALUES (v_kb.id, v_set, options, v_metrics, v_queries) RETURNING id INTO v_run;
  END IF;
  RETURN jsonb_build_object('run_id', v_run, 'metrics', v_metrics, 'queries', v_queries);
END
$$;
COMMENT ON FUNCTION kb.run_test_set(text, text, jsonb, boolean) IS
  'Runs every query of a test set with the given retrieval options (over the KB''s '
  'retrieval_config) and returns Success@1, Success@5, MRR@10 and nDCG@10 with each query''s '
  'outcome; stored in kb.test_run when save and the caller may write the KB (run_id).';

CREATE OR REPLACE FUNCTION kb.set_document_usage_mode(kb text, title text, usage_mode text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base := kb._get_kb_for_write(set_document_usage_mode.kb);
  v_id bigint;
BEGIN
  PERFORM kb._check_document_args(title, '{}', usage_mode);
  UPDATE kb.document d SET usage_mode = set_document_usage_mode.usage_mode, updated_at = now()
   WHERE d.kb_id = v_kb.id AND d.title = set_document_usage_mode.title
  RETURNING d.id INTO v_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'document "%" does not exist in knowledge base "%"', title, kb
      USING ERRCODE = 'no_data_found';
  END IF;
  RETURN v_id;
END
$$;
COMMENT ON FUNCTION kb.set_document_usage_mode(text, text, text) IS
  'Sets how a document is used: rag (retrieved when relevant), system (always in the '
  'context) or policy (always in the context, as a rule not to contradict). Takes effect '
  'at once; no reindex.';
