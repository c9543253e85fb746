-- kb._prepare_query and kb._py_prepare_query take expansion_ready: a full_text search
-- whose generation's words have no vectors yet no longer embeds the query for its term
-- expansion, whether the KB's default or the call asks for it. sql/ recreates both with
-- the new argument; the old signatures go, so that a call with four arguments is not
-- ambiguous.
DROP FUNCTION IF EXISTS kb._prepare_query(jsonb, jsonb, jsonb, text);
DROP FUNCTION IF EXISTS kb._py_prepare_query(jsonb, jsonb, jsonb, text);
