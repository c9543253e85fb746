-- bm25_k1 is now unset by default: a search scores BM25 with k1 1.5 when its method is
-- full_text and 1.2 in hybrid's BM25 channel and Tree Search (docs/performance.md). Every
-- knowledge base stored the old default, 1.2, written out; it becomes unset, so its
-- hybrid searches score as before and its full_text searches take the new default. A KB
-- that should keep 1.2 for full_text sets it again with kb.set_retrieval_config.
-- The trigger that validates a changed retrieval_config (sql/100) is off meanwhile: the
-- new value is one the settings model accepts.
LOCK TABLE kb.knowledge_base IN SHARE ROW EXCLUSIVE MODE;
DO $$
BEGIN
  IF EXISTS (SELECT FROM kb.knowledge_base
             WHERE (retrieval_config->>'bm25_k1')::double precision = 1.2) THEN
    -- As a replica applies rows: the check trigger does not run, and no foreign-key
    -- check is queued (an ALTER TABLE ... DISABLE TRIGGER here failed on "pending
    -- trigger events" where an earlier migration of the same upgrade changed the row).
    PERFORM set_config('session_replication_role', 'replica', true);
    UPDATE kb.knowledge_base
       SET retrieval_config = jsonb_set(retrieval_config, '{bm25_k1}', 'null')
     WHERE (retrieval_config->>'bm25_k1')::double precision = 1.2;
    PERFORM set_config('session_replication_role', 'origin', true);
  END IF;
END
$$;
