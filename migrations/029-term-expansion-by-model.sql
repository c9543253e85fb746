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
    ALTER TABLE kb.knowledge_base DISABLE TRIGGER knowledge_base_check;
    UPDATE kb.knowledge_base
       SET retrieval_config = jsonb_set(retrieval_config, '{term_expansion}', 'null')
     WHERE (retrieval_config->>'term_expansion')::integer = 0;
    ALTER TABLE kb.knowledge_base ENABLE TRIGGER knowledge_base_check;
  END IF;
END
$$;
