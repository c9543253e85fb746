-- The knowledge-graph query functions read by kb_id too (README "Beyond one machine"):
-- kb._graph_index returns the serving generation's row (its id and kb_id), and the helpers
-- take kb_id first. The old signatures go; sql/ recreates them.
DROP FUNCTION IF EXISTS kb._graph_index(text);
DROP FUNCTION IF EXISTS kb._graph_symbol(bigint, text, text[]);
DROP FUNCTION IF EXISTS kb._graph_reference_rows(bigint, text[], text, boolean);
