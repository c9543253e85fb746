-- A table source's triggers call a trigger function generated for the source (sql/208,
-- kb._table_source_triggers) instead of one shared function reading its arguments: the
-- shared one's triggers go here, and the install that follows makes each source's own.
DO $$
DECLARE
  r record;
BEGIN
  IF to_regprocedure('kb._table_source_changed()') IS NOT NULL THEN
    FOR r IN SELECT t.tgname, t.tgrelid FROM pg_trigger t
              WHERE t.tgfoid = 'kb._table_source_changed()'::regprocedure LOOP
      EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.tgrelid::regclass);
    END LOOP;
  END IF;
END
$$;
UPDATE kb.source SET config = config - 'changed_keys' WHERE kind = 'table';
