-- Table sources: an application's own table as a knowledge base's source, kept in step in
-- the database, no client needed. kb.add_table_source names the key, the text (columns or
-- an expression), the title, metadata columns and a filter; statement triggers on the
-- table queue the keys each INSERT, UPDATE, DELETE or TRUNCATE touched, in the
-- application's transaction (kb.source_change, one row a statement); the worker applies
-- them (kb.apply_source_changes): a row becomes a document, a changed text is indexed
-- again, a change to metadata columns only updates metadata, a row deleted or leaving the
-- filter removes its document. The source's expressions are always evaluated as the role
-- that attached it (the worker sets that role to read the table), never as kbpg's owner.

-- The role that attaches or changes a source is the one recorded: its rights read the table.
CREATE OR REPLACE FUNCTION kb._source_owner_role() RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  -- Whoever sets what a source reads answers for it; nobody sets the role by hand.
  IF TG_OP = 'INSERT' OR NEW.config IS DISTINCT FROM OLD.config
     OR NEW.relation IS DISTINCT FROM OLD.relation THEN
    NEW.owner_role := current_user;
  ELSE
    NEW.owner_role := OLD.owner_role;
  END IF;
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER source_owner_role BEFORE INSERT OR UPDATE ON kb.source
  FOR EACH ROW EXECUTE FUNCTION kb._source_owner_role();

CREATE OR REPLACE FUNCTION kb._relation_name(p_relation oid) RETURNS text
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT format('%I.%I', n.nspname, c.relname)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_relation
$$;
COMMENT ON FUNCTION kb._relation_name(oid) IS
  'Internal: a table''s schema-qualified name, whatever the search_path.';

-- The SELECT that reads a table source's rows: key, title, text, metadata, filter.
CREATE OR REPLACE FUNCTION kb._table_source_select(p_source kb.source, p_where text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT format('SELECT (%s)::text AS k, (%s)::text AS ti, (%s)::text AS t, (%s)::jsonb AS m, '
                'coalesce((%s)::boolean, false) AS f FROM %s WHERE %s',
                p_source.config->>'key_sql', coalesce(p_source.config->>'title_sql', 'NULL'),
                p_source.config->>'text_sql', p_source.config->>'metadata_sql',
                coalesce(p_source.config->>'filter', 'true'), p_source.relation::regclass,
                p_where)
$$;
COMMENT ON FUNCTION kb._table_source_select(kb.source, text) IS
  'Internal: the query that reads a table source''s rows (key, title, text, metadata, '
  'filter) where p_where holds.';

CREATE OR REPLACE FUNCTION kb.add_table_source(
    kb text,
    source regclass,
    key_column text,
    text_columns text[] DEFAULT NULL,
    text_expression text DEFAULT NULL,
    title_column text DEFAULT NULL,
    metadata_columns text[] DEFAULT '{}',
    filter text DEFAULT NULL,
    name text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb     kb.knowledge_base := kb._get_kb_for_write(add_table_source.kb);
  v_name   text := coalesce(add_table_source.name, kb._relation_name(source));
  v_key    record;
  v_cfg    jsonb;
  v_read   text[];
  v_src    kb.source;
  v_probe  text;
BEGIN
  IF source IS NULL OR key_column IS NULL THEN
    RAISE EXCEPTION 'a table source needs its table and key_column'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF (SELECT relkind FROM pg_class WHERE oid = source) NOT IN ('r', 'p') THEN
    RAISE EXCEPTION '% is not a table', source USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT has_table_privilege(current_user, source, 'SELECT') THEN
    RAISE EXCEPTION 'reading % as a source needs SELECT on it, which % does not have',
                    source, current_user USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF NOT has_table_privilege(current_user, source, 'TRIGGER') THEN
    RAISE EXCEPTION 'following % needs triggers on it: % needs the TRIGGER privilege (or '
                    'to own the table)', source, current_user
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF (text_columns IS NULL) = (text_expression IS NULL) THEN
    RAISE EXCEPTION 'source "%": give text_columns or text_expression, one of them', v_name
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.atttypid INTO v_key
    FROM pg_attribute a
   WHERE a.attrelid = source AND a.attname = key_column AND a.attnum > 0 AND NOT a.attisdropped;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'source "%": % has no column "%"', v_name, source, key_column
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF v_key.atttypid NOT IN ('integer'::regtype, 'bigint'::regtype, 'smallint'::regtype,
                            'text'::regtype, 'character varying'::regtype, 'uuid'::regtype) THEN
    RAISE EXCEPTION 'source "%": key_column "%" is %; a key is an integer, text or uuid column',
                    v_name, key_column, v_key.type USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_index i
                  WHERE i.indrelid = source AND i.indisunique AND i.indnkeyatts = 1
                    AND i.indpred IS NULL
                    AND i.indkey[0] = (SELECT attnum FROM pg_attribute
                                        WHERE attrelid = source AND attname = key_column)) THEN
    RAISE EXCEPTION 'source "%": key_column "%" must be unique', v_name, key_column
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'its primary key, or a column with a unique index of its own';
  END IF;
  v_cfg := jsonb_build_object(
    'key_column', key_column,
    'key_type', v_key.type,
    'key_sql', format('%I', key_column),
    'text_columns', to_jsonb(text_columns),
    'text_expression', text_expression,
    'text_sql', coalesce(text_expression, (
      SELECT 'concat_ws(E''\n\n'', ' || string_agg(format('(%I)::text', t), ', ') || ')'
        FROM unnest(text_columns) t)),
    'title_column', title_column,
    'title_sql', CASE WHEN title_column IS NOT NULL THEN format('%I', title_column) END,
    'metadata_columns', to_jsonb(coalesce(metadata_columns, '{}')),
    'metadata_sql', CASE WHEN coalesce(cardinality(metadata_columns), 0) = 0 THEN '''{}'''
                         ELSE 'jsonb_build_object(' || (
                           SELECT string_agg(format('%L, %I', m, m), ', ')
                             FROM unnest(metadata_columns) m) || ')' END,
    'filter', filter);
  -- Compiled as the caller, on no rows: a column or expression that is wrong is named
  -- now, and the columns it reads are known (what an UPDATE must touch to matter).
  v_src.relation := source;
  v_src.config := v_cfg;
  v_probe := 'kbpg_source_probe_' || pg_backend_pid();
  BEGIN
    EXECUTE format('CREATE TEMP VIEW %I AS %s', v_probe, kb._table_source_select(v_src, 'false'));
  EXCEPTION WHEN OTHERS THEN
    RAISE EXCEPTION 'source "%": %', v_name, SQLERRM
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'key_column, text_columns or text_expression, title_column, metadata_columns '
                   'and filter are read from the table''s rows (expressions see pg_catalog: '
                   'qualify your own functions)';
  END;
  SELECT array_agg(DISTINCT a.attname::text ORDER BY a.attname::text) INTO v_read
    FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
    JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
   WHERE r.ev_class = format('pg_temp.%I', v_probe)::regclass AND d.refobjid = source
     AND d.refobjsubid > 0;
  EXECUTE format('DROP VIEW pg_temp.%I', v_probe);
  -- The columns read: an UPDATE that changes none of them queues nothing.
  v_cfg := v_cfg || jsonb_build_object('columns_read', to_jsonb(v_read));

  SELECT * INTO v_src FROM kb.source s WHERE s.kb_id = v_kb.id AND s.name = v_name FOR UPDATE;
  IF FOUND AND (v_src.kind <> 'table' OR v_src.relation <> source) THEN
    RAISE EXCEPTION 'source "%" of knowledge base "%" already reads % "%"',
                    v_name, v_kb.name, v_src.kind, v_src.locator
      USING ERRCODE = 'duplicate_object',
            HINT = 'choose another name, or kb.drop_source the old one first';
  ELSIF FOUND THEN
    -- Attached again: new settings, and every row and document checked against them.
    UPDATE kb.source s
       SET config = v_cfg, locator = kb._relation_name(source), state = 'active',
           last_error = NULL
     WHERE s.kb_id = v_kb.id AND s.id = v_src.id;
  ELSE
    IF EXISTS (SELECT 1 FROM kb.source s WHERE s.kb_id = v_kb.id AND s.relation = source) THEN
      RAISE EXCEPTION 'knowledge base "%" already follows %', v_kb.name, source
        USING ERRCODE = 'duplicate_object';
    END IF;
    INSERT INTO kb.source AS s (kb_id, name, kind, locator, relation, config)
    VALUES (v_kb.id, v_name, 'table', kb._relation_name(source), source, v_cfg)
    RETURNING s.id INTO v_src.id;
  END IF;
  PERFORM kb._attach_table_source(v_kb.id, v_src.id);
  RETURN v_src.id;
END
$$;
COMMENT ON FUNCTION kb.add_table_source(text, regclass, text, text[], text, text, text[], text,
    text) IS
  'Makes a table a source of a knowledge base: each row (by key_column, unique) is a '
  'document whose text is text_columns joined (or text_expression), titled by '
  'title_column, with metadata_columns as metadata, where filter holds. Triggers keep it '
  'in step in the application''s transaction; existing rows are queued at once and indexed '
  'in batches by the worker. Needs SELECT and TRIGGER on the table; expressions run with '
  'the caller''s rights. Called again with the same name, it applies new settings and '
  'checks every row and document again (how a broken source is repaired). Returns its id.';

-- Creates a table source's triggers and queues its rows, for a source row whose recorded
-- role the session may act as and which may: SECURITY DEFINER because a role that may
-- attach a source need not be able to write kbpg's queue.
CREATE OR REPLACE FUNCTION kb._attach_table_source(p_kb_id integer, p_source_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_src kb.source;
BEGIN
  SELECT * INTO v_src FROM kb.source s
   WHERE s.kb_id = p_kb_id AND s.id = p_source_id AND s.kind = 'table' AND s.state = 'active';
  IF NOT FOUND OR NOT pg_has_role(session_user, v_src.owner_role, 'MEMBER')
     OR NOT kb._can_write_as(p_kb_id, v_src.owner_role::name)
     OR NOT has_table_privilege(v_src.owner_role, v_src.relation, 'SELECT')
     OR NOT has_table_privilege(v_src.owner_role, v_src.relation, 'TRIGGER') THEN
    RAISE EXCEPTION 'source % of knowledge base % cannot be attached', p_source_id, p_kb_id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  PERFORM kb._table_source_triggers(v_src);
  -- Every row now, and every document the source has (a row gone meanwhile removes it),
  -- in batches of 1,000 keys the worker applies one at a time.
  DELETE FROM kb.source_change c WHERE c.kb_id = p_kb_id AND c.source_id = p_source_id;
  EXECUTE format(
    'INSERT INTO kb.source_change (kb_id, source_id, keys) '
    'SELECT $1, $2, array_agg(k) FROM ('
    '  SELECT k, (row_number() OVER () - 1) / 1000 AS b FROM ('
    '    SELECT (%I)::text AS k FROM %s UNION '
    '    SELECT d.source_key FROM kb.document d WHERE d.kb_id = $1 AND d.source_id = $2) u) q '
    'GROUP BY b ORDER BY b',
    v_src.config->>'key_column', v_src.relation::regclass)
    USING p_kb_id, p_source_id;
  PERFORM pg_notify('kbpg_jobs', json_build_object('source', p_source_id)::text);
END
$$;
COMMENT ON FUNCTION kb._attach_table_source(integer, bigint) IS
  'Internal: creates a table source''s triggers and queues its rows and documents, for a '
  'source whose recording role may read the table, create triggers on it and write the KB.';

-- Drops the triggers of a table source that no longer exists (kb.drop_source deletes the
-- row first, under the caller's rights): for a source that still exists it does nothing.
CREATE OR REPLACE FUNCTION kb._detach_table_source(p_kb_id integer, p_source_id bigint,
                                                   p_relation oid)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM kb.source s WHERE s.kb_id = p_kb_id AND s.id = p_source_id) THEN
    RETURN;
  END IF;
  DELETE FROM kb.source_change c WHERE c.kb_id = p_kb_id AND c.source_id = p_source_id;
  PERFORM kb._table_source_untrigger(p_kb_id, p_source_id, p_relation);
END
$$;
COMMENT ON FUNCTION kb._detach_table_source(integer, bigint, oid) IS
  'Internal: drops the triggers and trigger function of a table source that was dropped.';

-- A table source's trigger function is generated for it, with the source's key column and
-- the columns it reads written in: its queries are planned once per connection, with the
-- columns' own types and equality, and nothing is looked up on the application's write
-- path. kbpg install generates the functions again, so they follow the release; it creates
-- only the triggers that are missing (p_recreate false): dropping a trigger locks the
-- application's table against reads as well, which an install must not do to each one.
-- Attaching a source (its key or columns may have changed) makes its triggers anew.
CREATE OR REPLACE FUNCTION kb._table_source_triggers(p_src kb.source,
                                                     p_recreate boolean DEFAULT true)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_fn   text := format('_source_%s_%s_changed', p_src.kb_id, p_src.id);
  v_key  text := format('%I', p_src.config->>'key_column');
  v_cmp  text;
  v_col  record;
  -- Each trigger: its name's suffix, its event, its transition tables, its level (the
  -- last a row trigger on the key column alone).
  v_ops  text[][] := ARRAY[
    ['ins', 'INSERT', 'REFERENCING NEW TABLE AS kb_new', 'FOR EACH STATEMENT'],
    ['upd', 'UPDATE', 'REFERENCING OLD TABLE AS kb_old NEW TABLE AS kb_new', 'FOR EACH STATEMENT'],
    ['del', 'DELETE', 'REFERENCING OLD TABLE AS kb_old', 'FOR EACH STATEMENT'],
    ['trn', 'TRUNCATE', '', 'FOR EACH STATEMENT'],
    ['key', format('UPDATE OF %s', v_key), '',
     format('FOR EACH ROW WHEN (OLD.%1$s IS DISTINCT FROM NEW.%1$s)', v_key)]];
  v_tg   text;
  i      integer;
BEGIN
  -- The columns read besides the key, old against new: by the type's own equality, or
  -- as text for a type that has none (json, xml, point).
  FOR v_col IN SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type
                 FROM pg_attribute a
                WHERE a.attrelid = p_src.relation AND a.attnum > 0 AND NOT a.attisdropped
                  AND p_src.config->'columns_read' ? a.attname::text
                  AND a.attname <> p_src.config->>'key_column'
                ORDER BY a.attnum LOOP
    BEGIN
      EXECUTE format('SELECT NULL::%1$s IS DISTINCT FROM NULL::%1$s', v_col.type);
      v_cmp := concat_ws(' OR ', v_cmp, format('o.%1$I IS DISTINCT FROM n.%1$I', v_col.attname));
    EXCEPTION WHEN undefined_function THEN
      v_cmp := concat_ws(' OR ', v_cmp,
                         format('(o.%1$I)::text IS DISTINCT FROM (n.%1$I)::text', v_col.attname));
    END;
  END LOOP;
  -- INSERT and DELETE queue the keys; TRUNCATE queues "every document"; an UPDATE of a
  -- few rows queues those where a column read changed, a larger one every key it touched
  -- (the worker compares each row's text with its document's: nothing the same is
  -- indexed again) and so costs the application's write no comparison. A row whose key
  -- changed queues its old key too (a row trigger, on the key column only).
  EXECUTE format($f$
CREATE OR REPLACE FUNCTION kb.%1$I() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $body$
DECLARE
  n bigint;
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO kb.source_change (kb_id, source_id, keys)
    SELECT %2$s, %3$s, q.k FROM (SELECT array_agg((n.%4$s)::text) AS k FROM kb_new n) q
     WHERE q.k IS NOT NULL;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO kb.source_change (kb_id, source_id, keys)
    SELECT %2$s, %3$s, q.k FROM (SELECT array_agg((o.%4$s)::text) AS k FROM kb_old o) q
     WHERE q.k IS NOT NULL;
  ELSIF TG_LEVEL = 'ROW' THEN
    INSERT INTO kb.source_change (kb_id, source_id, keys)
    VALUES (%2$s, %3$s, ARRAY[(OLD.%4$s)::text]);
  ELSIF TG_OP = 'UPDATE' THEN
    SELECT count(*) INTO n FROM (SELECT FROM kb_new LIMIT 65) q;  -- (INTO: planned once)
    IF n <= 64 THEN
      INSERT INTO kb.source_change (kb_id, source_id, keys)
      SELECT %2$s, %3$s, q.k
        FROM (SELECT array_agg((n.%4$s)::text) AS k
                FROM kb_new n LEFT JOIN kb_old o ON o.%4$s = n.%4$s
               WHERE o.%4$s IS NULL OR %5$s) q
       WHERE q.k IS NOT NULL;
    ELSE
      INSERT INTO kb.source_change (kb_id, source_id, keys)
      SELECT %2$s, %3$s, q.k FROM (SELECT array_agg((n.%4$s)::text) AS k FROM kb_new n) q
       WHERE q.k IS NOT NULL;
    END IF;
  ELSE
    INSERT INTO kb.source_change (kb_id, source_id, keys) VALUES (%2$s, %3$s, NULL);
  END IF;
  IF FOUND THEN
    PERFORM pg_notify('kbpg_jobs', %6$L);
  END IF;
  RETURN NULL;
END
$body$
$f$, v_fn, p_src.kb_id, p_src.id, v_key, coalesce(v_cmp, 'false'),
             json_build_object('source', p_src.id)::text);
  EXECUTE format('REVOKE EXECUTE ON FUNCTION kb.%I() FROM PUBLIC', v_fn);
  EXECUTE format('COMMENT ON FUNCTION kb.%I() IS %L', v_fn,
                 format('Internal: the triggers of table source "%s" (id %s) of knowledge '
                        'base %s on %s; generated by kb.add_table_source.', p_src.name,
                        p_src.id, p_src.kb_id, p_src.locator));
  FOR i IN 1 .. 5 LOOP
    v_tg := format('kbpg_source_%s_%s_%s', p_src.kb_id, p_src.id, v_ops[i][1]);
    CONTINUE WHEN NOT p_recreate AND EXISTS (SELECT FROM pg_trigger t
                                              WHERE t.tgrelid = p_src.relation
                                                AND t.tgname = v_tg);
    EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', v_tg, p_src.relation::regclass);
    EXECUTE format('CREATE TRIGGER %I AFTER %s ON %s %s %s EXECUTE FUNCTION kb.%I()',
                   v_tg, v_ops[i][2], p_src.relation::regclass, v_ops[i][3], v_ops[i][4],
                   v_fn);
  END LOOP;
END
$$;
COMMENT ON FUNCTION kb._table_source_triggers(kb.source, boolean) IS
  'Internal: generates a table source''s trigger function, with its key and the columns '
  'it reads written in, and creates its triggers on the table (p_recreate: anew; '
  'otherwise only those missing).';

-- Drops a table source's triggers and trigger function.
CREATE OR REPLACE FUNCTION kb._table_source_untrigger(p_kb_id integer, p_source_id bigint,
                                                      p_relation oid)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_tg name;
BEGIN
  FOR v_tg IN SELECT t.tgname FROM pg_trigger t
               WHERE t.tgrelid = p_relation
                 AND t.tgname LIKE format('kbpg\_source\_%s\_%s\_%%', p_kb_id, p_source_id) LOOP
    EXECUTE format('DROP TRIGGER %I ON %s', v_tg, p_relation::regclass);
  END LOOP;
  EXECUTE format('DROP FUNCTION IF EXISTS kb.%I()',
                 format('_source_%s_%s_changed', p_kb_id, p_source_id));
END
$$;
COMMENT ON FUNCTION kb._table_source_untrigger(integer, bigint, oid) IS
  'Internal: drops a table source''s triggers and its generated trigger function.';

CREATE OR REPLACE FUNCTION kb.apply_source_changes(max_keys integer DEFAULT 1000)
RETURNS TABLE (kb text, source text, applied integer, waiting bigint, error text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_src   kb.source;
  v_kb    kb.knowledge_base;
  v_ids   bigint[];
  v_keys  text[];
  v_trunc boolean;
  v_rows  jsonb;
  v_err   text;
  r       record;
  v_doc   kb.document;
  v_docid bigint;
  v_key   text;
  v_text  text;
  v_limit bigint := kb._max_document_bytes();
  v_n     integer;
  v_fail  text;
BEGIN
  IF max_keys IS NULL OR max_keys < 1 THEN
    RAISE EXCEPTION 'max_keys must be at least 1' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  FOR v_src IN SELECT s.* FROM kb.source s
                WHERE s.kind = 'table' AND s.state = 'active'
                  AND EXISTS (SELECT 1 FROM kb.source_change c
                               WHERE c.kb_id = s.kb_id AND c.source_id = s.id)
                ORDER BY s.kb_id, s.id LOOP
    -- The oldest changes, whole statements, up to max_keys keys (at least one statement).
    SELECT array_agg(q.id ORDER BY q.id) INTO v_ids
      FROM (SELECT c.id FROM kb.source_change c
             WHERE c.kb_id = v_src.kb_id AND c.source_id = v_src.id
             ORDER BY c.id LIMIT max_keys FOR UPDATE SKIP LOCKED) q;
    CONTINUE WHEN v_ids IS NULL;  -- another worker has them
    SELECT array_agg(q.id), array_agg(DISTINCT k.key) FILTER (WHERE k.key IS NOT NULL),
           bool_or(q.keys IS NULL)
      INTO v_ids, v_keys, v_trunc
      FROM (SELECT c.id, c.keys, sum(coalesce(cardinality(c.keys), 1)) OVER (ORDER BY c.id) AS n
              FROM kb.source_change c
             WHERE c.kb_id = v_src.kb_id AND c.id = ANY (v_ids)) q
      LEFT JOIN LATERAL unnest(q.keys) k(key) ON true
     WHERE q.n - coalesce(cardinality(q.keys), 1) < max_keys;
    v_keys := coalesce(v_keys, '{}');
    SELECT * INTO v_kb FROM kb.knowledge_base WHERE id = v_src.kb_id;
    IF v_trunc THEN  -- truncated: every document the source has is checked
      v_keys := ARRAY(SELECT DISTINCT x FROM (
        SELECT unnest(coalesce(v_keys, '{}')) UNION
        SELECT d.source_key FROM kb.document d
         WHERE d.kb_id = v_src.kb_id AND d.source_id = v_src.id) u(x) WHERE x IS NOT NULL);
    END IF;
    v_err := NULL;
    -- Read as the role that attached the source: its rights, its expressions.
    BEGIN
      EXECUTE format('SET LOCAL ROLE %I', v_src.owner_role);
    EXCEPTION WHEN insufficient_privilege THEN
      v_err := format('the worker''s role %s cannot read as %s, the role that attached the '
                      'source (GRANT %I TO %I); the changes wait', session_user,
                      v_src.owner_role, v_src.owner_role, session_user);
    END;
    IF v_err IS NULL THEN
      BEGIN
        EXECUTE format('SELECT coalesce(jsonb_object_agg(q.k, to_jsonb(q)), ''{}'') FROM (%s) q',
                       kb._table_source_select(v_src, format('%I = ANY ($1::%s[])',
                         v_src.config->>'key_column', v_src.config->>'key_type')))
          INTO v_rows USING v_keys;
      EXCEPTION WHEN OTHERS THEN
        v_err := format('reading %s failed: %s', v_src.locator, SQLERRM);
        IF SQLSTATE NOT IN ('42501') THEN  -- a column gone or renamed: the source is broken
          EXECUTE 'SET LOCAL ROLE NONE';
          UPDATE kb.source s SET state = 'broken', last_error = v_err
           WHERE s.kb_id = v_src.kb_id AND s.id = v_src.id;
        END IF;
      END;
      EXECUTE 'SET LOCAL ROLE NONE';
    END IF;
    IF v_err IS NOT NULL THEN
      UPDATE kb.source s SET last_error = v_err WHERE s.kb_id = v_src.kb_id AND s.id = v_src.id;
      kb := v_kb.name; source := v_src.name; applied := 0; error := v_err;
      waiting := (SELECT sum(coalesce(cardinality(c.keys), 1)) FROM kb.source_change c
                   WHERE c.kb_id = v_src.kb_id AND c.source_id = v_src.id);
      RETURN NEXT;
      CONTINUE;
    END IF;
    v_n := 0;
    v_fail := NULL;
    FOREACH v_key IN ARRAY v_keys LOOP
      r := NULL;
      SELECT x.* INTO r FROM jsonb_to_record(v_rows->v_key)
          AS x(k text, ti text, t text, m jsonb, f boolean);
      SELECT * INTO v_doc FROM kb.document d
       WHERE d.kb_id = v_src.kb_id AND d.source_id = v_src.id AND d.source_key = v_key;
      IF r.k IS NULL OR NOT r.f OR kb._blank(r.t) THEN
        -- Gone, out of the filter, or no text: its document goes.
        IF v_doc.id IS NOT NULL THEN
          DELETE FROM kb.document d WHERE d.kb_id = v_src.kb_id AND d.id = v_doc.id;
          v_n := v_n + 1;
        END IF;
        CONTINUE;
      END IF;
      v_text := CASE WHEN kb._blank(r.ti) THEN r.t ELSE '# ' || r.ti || E'\n\n' || r.t END;
      r.ti := CASE WHEN kb._blank(r.ti)
                   THEN format('%s %s', v_src.locator, r.k)
                   ELSE format('%s (%s %s)', left(r.ti, 800), v_src.locator, r.k) END;
      IF octet_length(v_text) > v_limit THEN
        v_fail := format('row %s: its text is %s bytes; the limit is %s bytes', r.k,
                         octet_length(v_text), v_limit);
        CONTINUE;
      END IF;
      BEGIN
        IF v_doc.id IS NOT NULL AND v_doc.content_hash = md5(v_text) AND v_doc.status <> 'error' THEN
          -- The same text: a new title or metadata is written as it is, nothing re-embedded.
          IF v_doc.title <> r.ti OR v_doc.metadata <> r.m THEN
            UPDATE kb.document d SET title = r.ti, metadata = r.m, updated_at = now()
             WHERE d.kb_id = v_src.kb_id AND d.id = v_doc.id;
            v_n := v_n + 1;
          END IF;
          CONTINUE;
        END IF;
        IF v_doc.id IS NOT NULL AND v_doc.title <> r.ti THEN
          UPDATE kb.document d SET title = r.ti WHERE d.kb_id = v_src.kb_id AND d.id = v_doc.id;
        END IF;
        SELECT u.document_id INTO v_docid
          FROM kb._upsert_document(v_kb, r.ti, v_text, md5(v_text), r.m, NULL, 'rag', NULL,
                                   NULL, NULL, NULL, NULL, NULL, '[]') u;
        UPDATE kb.document d SET source_id = v_src.id, source_key = r.k
         WHERE d.kb_id = v_src.kb_id AND d.id = v_docid AND d.source_id IS NULL;
        v_n := v_n + 1;
      EXCEPTION WHEN unique_violation THEN
        v_fail := format('row %s: knowledge base "%s" already has a document "%s"',
                         r.k, v_kb.name, r.ti);
      END;
    END LOOP;
    DELETE FROM kb.source_change c WHERE c.kb_id = v_src.kb_id AND c.id = ANY (v_ids);
    UPDATE kb.source s SET last_sync_at = now(), last_error = v_fail
     WHERE s.kb_id = v_src.kb_id AND s.id = v_src.id;
    kb := v_kb.name; source := v_src.name; applied := v_n; error := v_fail;
    waiting := (SELECT coalesce(sum(coalesce(cardinality(c.keys), 1)), 0) FROM kb.source_change c
                 WHERE c.kb_id = v_src.kb_id AND c.source_id = v_src.id);
    RETURN NEXT;
  END LOOP;
END
$$;
COMMENT ON FUNCTION kb.apply_source_changes(integer) IS
  'Applies the queued changes of table sources (the worker calls it): for up to max_keys '
  'keys of each source, the rows are read as the role that attached the source and their '
  'documents added, replaced, retitled (metadata only: nothing re-embedded) or removed. '
  'One row per source: how many documents changed, keys still waiting, and the error that '
  'stopped it or a row it skipped.';

-- DDL on a source table: a table or column a source reads, dropped or renamed, breaks the
-- source (its documents stay as they are; kb.add_table_source again repairs it); a renamed
-- table is followed.
CREATE OR REPLACE FUNCTION kb._table_source_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_src kb.source;
  v_err text;
  v_gone text[];
BEGIN
  FOR v_src IN SELECT * FROM kb.source s WHERE s.kind = 'table' AND s.state = 'active' LOOP
    v_err := NULL;
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = v_src.relation) THEN
      v_err := format('table %s was dropped', v_src.locator);
    ELSE
      v_gone := ARRAY(SELECT c FROM jsonb_array_elements_text(v_src.config->'columns_read') c
                       WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                                          WHERE a.attrelid = v_src.relation AND a.attname = c
                                            AND NOT a.attisdropped));
      IF cardinality(v_gone) > 0 THEN
        v_err := format('table %s no longer has column %s, which the source reads',
                        kb._relation_name(v_src.relation), array_to_string(v_gone, ', '));
      ELSIF v_src.locator <> kb._relation_name(v_src.relation) THEN
        UPDATE kb.source s SET locator = kb._relation_name(v_src.relation)
         WHERE s.kb_id = v_src.kb_id AND s.id = v_src.id;
      END IF;
    END IF;
    IF v_err IS NOT NULL THEN
      UPDATE kb.source s SET state = 'broken', last_error = v_err || ': changes are not '
             'followed until kb.add_table_source attaches it again'
       WHERE s.kb_id = v_src.kb_id AND s.id = v_src.id;
      DELETE FROM kb.source_change c WHERE c.kb_id = v_src.kb_id AND c.source_id = v_src.id;
      PERFORM kb._table_source_untrigger(v_src.kb_id, v_src.id, v_src.relation);  -- its triggers go
      RAISE WARNING 'kbpg source "%" of knowledge base % is broken: %', v_src.name,
                    v_src.kb_id, v_err
        USING HINT = 'its documents stay as they are; kb.add_table_source with the same name '
                     'repairs it';
    END IF;
  END LOOP;
END
$$;
COMMENT ON FUNCTION kb._table_source_ddl() IS
  'Internal: the event trigger that marks a table source broken when its table or a '
  'column it reads is dropped or renamed, and follows a renamed table.';
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'kbpg_table_source_ddl') THEN
    CREATE EVENT TRIGGER kbpg_table_source_ddl ON ddl_command_end
      WHEN TAG IN ('ALTER TABLE', 'DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
      EXECUTE FUNCTION kb._table_source_ddl();
  END IF;
END
$$;

-- Each active table source's trigger function, generated again by this release.
DO $$
DECLARE
  v_src kb.source;
BEGIN
  FOR v_src IN SELECT * FROM kb.source s
                WHERE s.kind = 'table' AND s.state = 'active'
                  AND EXISTS (SELECT FROM pg_class c WHERE c.oid = s.relation) LOOP
    PERFORM kb._table_source_triggers(v_src, false);
  END LOOP;
END
$$;
