-- Indexing a document passes its knowledge base with its generation, so every statement
-- the build runs is pinned to one KB: the old signatures go (sql/000 makes the new ones).
DROP FUNCTION IF EXISTS kb._build_document(text, text, jsonb, integer[], jsonb, bytea, bigint);
DROP FUNCTION IF EXISTS kb._py_build_document(text, text, jsonb, integer[], jsonb, bytea, bigint);
