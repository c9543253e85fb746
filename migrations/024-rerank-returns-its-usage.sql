-- A reranking reports what it cost: kb._rerank returns its scores with its usage (a chat
-- model's listwise ranking makes an LLM call); sql/000 makes the new signatures.
DROP FUNCTION IF EXISTS kb._rerank(jsonb, text, text[]);
DROP FUNCTION IF EXISTS kb._py_rerank(jsonb, text, text[]);
