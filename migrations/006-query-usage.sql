-- Every search returns what it cost (query embedding, rerank, LLM calls) in a usage column.
-- The search functions' result shape changes: drop them; sql/ recreates them.
DO $$
DECLARE
  r regprocedure;
BEGIN
  IF to_regtype('kb.prepared_query') IS NOT NULL THEN
    ALTER TYPE kb.prepared_query ADD ATTRIBUTE usage jsonb;
  END IF;
  FOR r IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'kb'::regnamespace
              AND p.proname IN ('search', 'explain_search', '_search_core', '_search_rows') LOOP
    EXECUTE 'DROP FUNCTION ' || r;
  END LOOP;
END
$$;
