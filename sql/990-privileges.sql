-- Who may write what kbpg builds, in one place (applied on every install and upgrade).
--
-- Every role may use kbpg, and row-level security decides which rows it sees and changes
-- (migration 007): documents, jobs and index generations of the KBs it may write. What is
-- built from the documents (chunks, vectors, BM25 postings and statistics, the strategies'
-- tables) is written by kbpg's indexing worker, which connects as the schema's owner, and
-- removed with its document or generation by ON DELETE CASCADE (which PostgreSQL runs as
-- the tables' owner). No other role may write those tables: a raw INSERT or DELETE there
-- is refused, so a chunk can never lack its vector, postings or statistics.
--
-- The tables are those of kbpg_db.config.FEATURES and the searchable units (generated
-- when kbpg installs this file), so a new feature's tables get the same rules: row-level
-- security that shows a row to whoever may read its index generation, SELECT for every
-- role, and no writes. A table whose policies a migration already made keeps them.
DO $$
DECLARE
  t text;
  k constant text := 'index_id = ANY ((SELECT kb._readable_indexes(current_user))::bigint[])';
  w constant text := 'kb._can_write_index(index_id)';
BEGIN
  FOREACH t IN ARRAY ARRAY[/*@index_tables*/'chunk'/*@*/] LOOP
    IF NOT (SELECT relrowsecurity FROM pg_class WHERE oid = format('kb.%I', t)::regclass) THEN
      EXECUTE format('ALTER TABLE kb.%I ENABLE ROW LEVEL SECURITY', t);
    END IF;
    IF NOT EXISTS (SELECT FROM pg_policy WHERE polrelid = format('kb.%I', t)::regclass) THEN
      EXECUTE format('CREATE POLICY readable ON kb.%I FOR SELECT USING (%s)', t, k);
      EXECUTE format('CREATE POLICY adds ON kb.%I FOR INSERT WITH CHECK (%s)', t, w);
      EXECUTE format('CREATE POLICY changes ON kb.%I FOR UPDATE USING (%s) WITH CHECK (%s)',
                     t, w, w);
      EXECUTE format('CREATE POLICY removes ON kb.%I FOR DELETE USING (%s)', t, w);
    END IF;
    EXECUTE format('GRANT SELECT ON kb.%I TO PUBLIC', t);
  END LOOP;
END
$$;
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON /*@index_tables_qualified*/kb.chunk/*@*/
FROM PUBLIC;

-- SECURITY DEFINER trigger functions run only as their triggers; nobody calls them.
-- They keep what a cascade or a member's document change implies (HNSW indexes, BM25
-- statistics, chunk metadata, stale communities) in step, whoever made the change.
REVOKE EXECUTE ON FUNCTION kb._kb_index_hnsw(), kb._document_metadata_sync(),
  kb._chunk_after_insert(), kb._chunk_after_delete(), kb._kb_index_after_delete(),
  kb._graph_node_gone(), kb._table_source_ddl() FROM PUBLIC;
-- (A table source's generated trigger function is revoked when it is made.)

-- A table source's triggers are created and dropped for it (kb.add_table_source,
-- kb.drop_source), as kbpg's owner: the role that attaches a source needs the TRIGGER
-- privilege on the table, not on kbpg's queue. Each acts only on a source row as it
-- must be: kb._attach_table_source for an active one whose recorded role (set by a
-- trigger, never by hand) the session may act as, and which may read the table, create
-- triggers on it and write its KB;
-- kb._detach_table_source for one that no longer exists. Called otherwise, the first
-- raises insufficient_privilege and the second does nothing.

-- The internal SECURITY DEFINER functions left callable by every role are lookups that
-- row-level policies and kbpg's own SQL functions evaluate with the caller's rights, so
-- they must stay executable; each answers only for a role the session may act as
-- (pg_has_role(session_user, ...)) or by a key only the caller can know, and changes
-- nothing: kb._readable_kbs, kb._readable_indexes, kb._team_name, kb._kb_name_taken,
-- kb._llm_cache_get and kb._server_setting (tests/integration/test_security.py calls each
-- as a role in no team).
