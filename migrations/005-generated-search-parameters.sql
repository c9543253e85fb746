-- kb.search / kb.explain_search take every retrieval_config field as a named parameter,
-- generated from the retrieval model (sql/400-search.sql); kb._overrides takes the named
-- options as one object. The old signatures go; sql/ recreates the functions.
DROP FUNCTION IF EXISTS kb.search(text, text, integer, text, jsonb, double precision,
  double precision, integer, double precision, boolean, integer, double precision,
  double precision, double precision, integer, jsonb);
DROP FUNCTION IF EXISTS kb.explain_search(text, text, integer, text, jsonb, double precision,
  double precision, integer, double precision, boolean, integer, double precision,
  double precision, double precision, integer, jsonb);
DROP FUNCTION IF EXISTS kb._overrides(integer, text, jsonb, double precision, double precision,
  integer, double precision, boolean, integer, double precision, double precision,
  double precision, integer, jsonb);

-- Index generations: building -> active -> (dropped when replaced), or building -> failed.
-- 'retired' was never entered: a replaced generation is dropped in the switch itself.
ALTER TABLE kb.kb_index DROP CONSTRAINT kb_index_status_check;
ALTER TABLE kb.kb_index ADD CONSTRAINT kb_index_status_check
  CHECK (status IN ('building', 'active', 'failed'));
