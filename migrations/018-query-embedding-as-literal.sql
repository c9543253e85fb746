-- kb._py_prepare_query hands the query's embedding back as an array literal
-- (kb.prepared_query_text), which kb._prepare_query reads in C; sql/ recreates it with
-- its new return type.
DROP FUNCTION IF EXISTS kb._py_prepare_query(jsonb, jsonb, jsonb, text);
