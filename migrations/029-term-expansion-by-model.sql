-- term_expansion is now unset by default: full_text expands a query with 16 words where
-- the KB embeds with a local model and not at all with a provider's model
-- (kb._term_expansion; docs/performance.md, "Term expansion"). A knowledge base made
-- since term expansion came stored the old default, 0, written out; it becomes unset, so
-- its full_text searches take the new default. A KB that should keep plain BM25 sets 0
-- again with kb.set_retrieval_config.
-- The trigger that validates a changed retrieval_config (sql/100) is off meanwhile: the
-- new value is one the settings model accepts.
LOCK TABLE kb.knowledge_base IN SHARE ROW EXCLUSIVE MODE;
DO $$
BEGIN
  IF EXISTS (SELECT FROM kb.knowledge_base
             WHERE (retrieval_config->>'term_expansion')::integer = 0) THEN
    -- As a replica applies rows: the check trigger does not run, and no foreign-key
    -- check is queued (an ALTER TABLE ... DISABLE TRIGGER here failed on "pending
    -- trigger events" where an earlier migration of the same upgrade changed the row).
    PERFORM set_config('session_replication_role', 'replica', true);
    UPDATE kb.knowledge_base
       SET retrieval_config = jsonb_set(retrieval_config, '{term_expansion}', 'null')
     WHERE (retrieval_config->>'term_expansion')::integer = 0;
    PERFORM set_config('session_replication_role', 'origin', true);
  END IF;
END
$$;
