-- Sources: the folders and repositories a knowledge base follows. kbpg sync reads a
-- source's files, asks kb.sync_plan what changed since the last sync (by each file's key,
-- its path, and the hash of its bytes), and applies the plan: new and changed files are
-- put (kb.put_document, kb.add_file), renamed ones moved (kb.move_document, no
-- re-embedding), removed ones deleted; kb.bind_document records each file's key and hash.

CREATE OR REPLACE FUNCTION kb._get_source(p_kb_id integer, p_kb_name text, p_name text)
RETURNS kb.source
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_src kb.source;
BEGIN
  SELECT * INTO v_src FROM kb.source s WHERE s.kb_id = p_kb_id AND s.name = p_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'source "%" does not exist in knowledge base "%"', p_name, p_kb_name
      USING ERRCODE = 'no_data_found', HINT = 'kb.sources lists the sources of a KB';
  END IF;
  RETURN v_src;
END
$$;
COMMENT ON FUNCTION kb._get_source(integer, text, text) IS
  'Internal: a knowledge base''s source by name, or no_data_found.';

CREATE OR REPLACE FUNCTION kb.add_source(kb text, name text, locator text,
                                         kind text DEFAULT 'folder', config jsonb DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb_for_write(add_source.kb);
  v_src kb.source;
BEGIN
  IF kb._blank(name) OR length(name) > 1000 THEN
    RAISE EXCEPTION 'a source needs a name of 1 to 1000 characters'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF kb._blank(locator) THEN
    RAISE EXCEPTION 'source "%" needs a locator (the folder it reads)', name
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF kind IS NULL OR kind NOT IN ('folder', 'repository') THEN
    RAISE EXCEPTION 'source "%": unknown kind "%"', name, kind
      USING ERRCODE = 'invalid_parameter_value', HINT = 'kinds: folder, repository';
  END IF;
  IF config IS NULL OR jsonb_typeof(config) <> 'object' THEN
    RAISE EXCEPTION 'source "%": config must be a JSON object', name
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT * INTO v_src FROM kb.source s WHERE s.kb_id = v_kb.id AND s.name = add_source.name
    FOR UPDATE;
  IF FOUND THEN
    IF v_src.locator <> add_source.locator OR v_src.kind <> add_source.kind THEN
      RAISE EXCEPTION 'source "%" of knowledge base "%" already reads % "%"',
                      name, v_kb.name, v_src.kind, v_src.locator
        USING ERRCODE = 'duplicate_object',
              HINT = 'choose another name, or kb.drop_source the old one first';
    END IF;
    UPDATE kb.source s SET config = add_source.config
     WHERE s.kb_id = v_kb.id AND s.id = v_src.id;
    RETURN v_src.id;
  END IF;
  INSERT INTO kb.source AS s (kb_id, name, kind, locator, config)
  VALUES (v_kb.id, name, kind, locator, config)
  RETURNING s.id INTO v_src.id;
  RETURN v_src.id;
END
$$;
COMMENT ON FUNCTION kb.add_source(text, text, text, text, jsonb) IS
  'Adds a source to a knowledge base (kind folder or repository; locator: the path it '
  'reads), or returns the one of that name when it reads the same place. Returns its id.';

CREATE OR REPLACE FUNCTION kb.drop_source(kb text, name text, delete_documents boolean DEFAULT false)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb_for_write(drop_source.kb);
  v_src kb.source := kb._get_source(v_kb.id, v_kb.name, drop_source.name);
  v_n   integer;
BEGIN
  IF delete_documents THEN
    DELETE FROM kb.document d WHERE d.kb_id = v_kb.id AND d.source_id = v_src.id;
  ELSE
    UPDATE kb.document d SET source_id = NULL, source_key = NULL, source_hash = NULL
     WHERE d.kb_id = v_kb.id AND d.source_id = v_src.id;
  END IF;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  DELETE FROM kb.source s WHERE s.kb_id = v_kb.id AND s.id = v_src.id;
  IF v_src.kind = 'table' THEN  -- its triggers go with it
    PERFORM kb._detach_table_source(v_kb.id, v_src.id, v_src.relation);
  END IF;
  RETURN v_n;
END
$$;
COMMENT ON FUNCTION kb.drop_source(text, text, boolean) IS
  'Removes a source (a table source''s triggers too). Its documents stay, as documents '
  'added by hand, unless delete_documents is true. Returns how many documents it kept or '
  'deleted.';

CREATE OR REPLACE FUNCTION kb.sync_plan(kb text, source text, files jsonb)
RETURNS TABLE (action text, source_key text, document_id bigint, moved_from text)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb_for_write(sync_plan.kb);
  v_src kb.source := kb._get_source(v_kb.id, v_kb.name, sync_plan.source);
BEGIN
  IF files IS NULL OR jsonb_typeof(files) <> 'array' OR EXISTS (
       SELECT 1 FROM jsonb_array_elements(files) e
        WHERE jsonb_typeof(e) <> 'object' OR kb._blank(e->>'key') OR kb._blank(e->>'hash')) THEN
    RAISE EXCEPTION 'files must be a JSON array of {"key": ..., "hash": ...} objects'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF (SELECT count(DISTINCT e->>'key') <> count(*) FROM jsonb_array_elements(files) e) THEN
    RAISE EXCEPTION 'files names a key more than once' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN QUERY
  WITH f AS (
    SELECT x.key, x.hash FROM jsonb_to_recordset(files) AS x(key text, hash text)
  ), d AS (
    SELECT dd.id, dd.source_key AS key, dd.source_hash AS hash FROM kb.document dd
     WHERE dd.kb_id = v_kb.id AND dd.source_id = v_src.id
  ), fresh AS (  -- keys the source has not seen, whose titles no other document holds
    SELECT f.key, f.hash, row_number() OVER (PARTITION BY f.hash ORDER BY f.key) AS n
      FROM f WHERE NOT EXISTS (SELECT 1 FROM d WHERE d.key = f.key)
       AND NOT EXISTS (SELECT 1 FROM kb.document o WHERE o.kb_id = v_kb.id AND o.title = f.key)
  ), gone AS (
    SELECT d.id, d.key, d.hash, row_number() OVER (PARTITION BY d.hash ORDER BY d.key) AS n
      FROM d WHERE NOT EXISTS (SELECT 1 FROM f WHERE f.key = d.key)
  ), moved AS (  -- a file gone and one new with the same bytes: a rename
    SELECT fresh.key, gone.id, gone.key AS old_key
      FROM fresh JOIN gone ON gone.hash = fresh.hash AND gone.n = fresh.n
  )
  SELECT 'unchanged', f.key, d.id, NULL::text FROM f JOIN d ON d.key = f.key
   WHERE d.hash = f.hash
  UNION ALL
  SELECT 'changed', f.key, d.id, NULL FROM f JOIN d ON d.key = f.key
   WHERE d.hash IS DISTINCT FROM f.hash
  UNION ALL
  SELECT 'moved', m.key, m.id, m.old_key FROM moved m
  UNION ALL
  -- New here: a document of that title added by hand becomes the source's (a put that
  -- finds the same text changes nothing); one that another source holds is a conflict.
  SELECT CASE WHEN o.source_id IS NOT NULL THEN 'conflict' ELSE 'added' END, f.key, o.id, NULL
    FROM f LEFT JOIN kb.document o ON o.kb_id = v_kb.id AND o.title = f.key
   WHERE NOT EXISTS (SELECT 1 FROM d WHERE d.key = f.key)
     AND NOT EXISTS (SELECT 1 FROM moved m WHERE m.key = f.key)
  UNION ALL
  SELECT 'removed', g.key, g.id, NULL FROM gone g
   WHERE NOT EXISTS (SELECT 1 FROM moved m WHERE m.id = g.id)
  ORDER BY 2;
END
$$;
COMMENT ON FUNCTION kb.sync_plan(text, text, jsonb) IS
  'What a sync of a source would change, given its files now as [{"key": path, "hash": '
  'sha256 of the bytes}]: each key unchanged, changed, added, moved (from a removed key '
  'with the same bytes: renamed, not re-embedded) or conflict (a document of that title '
  'belongs to another source), and each document whose key is gone, removed. Changes '
  'nothing.';

CREATE OR REPLACE FUNCTION kb.bind_document(kb text, source text, document_id bigint,
                                            source_key text, source_hash text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb_for_write(bind_document.kb);
  v_src kb.source := kb._get_source(v_kb.id, v_kb.name, bind_document.source);
  v_other text;
BEGIN
  IF kb._blank(source_key) THEN
    RAISE EXCEPTION 'source_key must name the document in its source'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT s.name INTO v_other FROM kb.document d JOIN kb.source s
      ON s.kb_id = d.kb_id AND s.id = d.source_id
   WHERE d.kb_id = v_kb.id AND d.id = bind_document.document_id AND d.source_id <> v_src.id;
  IF FOUND THEN
    RAISE EXCEPTION 'document % belongs to source "%", not "%"', document_id, v_other, source
      USING ERRCODE = 'object_in_use';
  END IF;
  UPDATE kb.document d
     SET source_id = v_src.id, source_key = bind_document.source_key,
         source_hash = bind_document.source_hash
   WHERE d.kb_id = v_kb.id AND d.id = bind_document.document_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'document % does not exist in knowledge base "%"', document_id, v_kb.name
      USING ERRCODE = 'no_data_found';
  END IF;
END
$$;
COMMENT ON FUNCTION kb.bind_document(text, text, bigint, text, text) IS
  'Records that a document is the file source_key of a source, with the hash of its bytes '
  '(what kb.sync_plan compares).';

CREATE OR REPLACE FUNCTION kb.move_document(kb text, document_id bigint, title text,
                                            metadata jsonb DEFAULT NULL,
                                            source_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb_for_write(move_document.kb);
  v_doc kb.document;
BEGIN
  PERFORM kb._check_document_args(title, coalesce(metadata, '{}'), 'rag');
  SELECT * INTO v_doc FROM kb.document d
   WHERE d.kb_id = v_kb.id AND d.id = move_document.document_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'document % does not exist in knowledge base "%"', document_id, v_kb.name
      USING ERRCODE = 'no_data_found';
  END IF;
  IF EXISTS (SELECT 1 FROM kb.document d WHERE d.kb_id = v_kb.id AND d.title = move_document.title
                AND d.id <> v_doc.id) THEN
    RAISE EXCEPTION 'knowledge base "%" already has a document "%"', v_kb.name, title
      USING ERRCODE = 'unique_violation';
  END IF;
  IF source_key IS NOT NULL AND v_doc.source_id IS NULL THEN
    RAISE EXCEPTION 'document "%" has no source: source_key is for a source''s documents',
                    v_doc.title USING ERRCODE = 'invalid_parameter_value';
  END IF;
  UPDATE kb.document d
     SET title = move_document.title, metadata = coalesce(move_document.metadata, d.metadata),
         source_key = coalesce(move_document.source_key, d.source_key),
         status = 'pending', error = NULL, attempts = 0, updated_at = now()
   WHERE d.kb_id = v_kb.id AND d.id = v_doc.id;
  -- Rebuilt under its new name: a chunk whose text names the file (a code file's heading
  -- path) is embedded again; every other chunk keeps its vector.
  PERFORM kb._enqueue_document(v_kb, v_doc.id);
  RETURN v_doc.id;
END
$$;
COMMENT ON FUNCTION kb.move_document(text, bigint, text, jsonb, text) IS
  'Renames a document (and sets its metadata, and its key in its source, when given) '
  'without embedding it again: it is rebuilt, and only chunks whose text names the old '
  'title (a code file''s heading path) get new vectors. Returns its id.';

CREATE OR REPLACE FUNCTION kb.finish_sync(kb text, source text, summary jsonb,
                                          error text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb_for_write(finish_sync.kb);
  v_src kb.source := kb._get_source(v_kb.id, v_kb.name, finish_sync.source);
BEGIN
  IF summary IS NULL OR jsonb_typeof(summary) <> 'object' THEN
    RAISE EXCEPTION 'summary must be a JSON object (the sync''s counts)'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  UPDATE kb.source s
     SET last_sync_at = now(), last_sync = finish_sync.summary, last_error = finish_sync.error
   WHERE s.kb_id = v_kb.id AND s.id = v_src.id;
END
$$;
COMMENT ON FUNCTION kb.finish_sync(text, text, jsonb, text) IS
  'Records a sync''s end on its source: when, its counts (summary), and its error if any.';

CREATE OR REPLACE VIEW kb.sources WITH (security_invoker = true) AS
  SELECT k.name AS kb, s.name AS source, s.kind, s.locator, s.state,
         count(d.id) AS documents,
         count(d.id) FILTER (WHERE d.status = 'ready') AS ready,
         count(d.id) FILTER (WHERE d.status IN ('pending', 'indexing')) AS queued,
         count(d.id) FILTER (WHERE d.status = 'error') AS failed,
         -- A table source's row changes not yet applied (keys).
         (SELECT coalesce(sum(coalesce(cardinality(c.keys), 1)), 0) FROM kb.source_change c
           WHERE c.kb_id = s.kb_id AND c.source_id = s.id) AS changes_waiting,
         s.last_sync_at, s.last_sync,
         -- How long the oldest change not yet searchable has waited.
         now() - least(min(d.updated_at) FILTER (WHERE d.status IN ('pending', 'indexing')),
                       (SELECT min(c.queued_at) FROM kb.source_change c
                         WHERE c.kb_id = s.kb_id AND c.source_id = s.id)) AS lag,
         s.last_error, s.config, s.created_at, s.kb_id, s.id AS source_id
  FROM kb.source s JOIN kb.knowledge_base k ON k.id = s.kb_id
  LEFT JOIN kb.document d ON d.kb_id = s.kb_id AND d.source_id = s.id
  GROUP BY s.kb_id, s.id, k.name;
COMMENT ON VIEW kb.sources IS
  'Each source of each knowledge base with its documents by state (ready, queued, '
  'failed), a table source''s row changes not applied yet, its last sync and its counts, '
  'the lag (age of the oldest change not yet searchable) and the last error.';
GRANT SELECT ON kb.sources TO PUBLIC;  -- rows as the caller's policies allow

CREATE OR REPLACE FUNCTION kb.retry_failed(kb text, title text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb_for_write(retry_failed.kb);
  v_id  bigint;
  v_n   integer := 0;
BEGIN
  IF title IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM kb.document d WHERE d.kb_id = v_kb.id AND d.title = retry_failed.title) THEN
    RAISE EXCEPTION 'document "%" does not exist in knowledge base "%"', title, v_kb.name
      USING ERRCODE = 'no_data_found';
  END IF;
  FOR v_id IN SELECT d.id FROM kb.document d
               WHERE d.kb_id = v_kb.id AND d.status = 'error'
                 AND (retry_failed.title IS NULL OR d.title = retry_failed.title)
               ORDER BY d.id FOR UPDATE LOOP
    UPDATE kb.document d SET status = 'pending', error = NULL, attempts = 0, updated_at = now()
     WHERE d.kb_id = v_kb.id AND d.id = v_id;
    PERFORM kb._enqueue_document(v_kb, v_id);
    v_n := v_n + 1;
  END LOOP;
  RETURN v_n;
END
$$;
COMMENT ON FUNCTION kb.retry_failed(text, text) IS
  'Queues again every document of a knowledge base whose indexing failed for good (or '
  'the one with title, if it failed), with a fresh count of attempts. Returns how many.';
