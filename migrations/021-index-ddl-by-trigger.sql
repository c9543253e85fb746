-- An index generation's HNSW index follows its kb.kb_index row (the trigger
-- kb._kb_index_hnsw, sql/050-teams.sql): the callable DDL function goes. Any role could
-- call it with a (kb, generation) pair that matched no row and it dropped that generation's
-- index unchecked.
DROP FUNCTION IF EXISTS kb._hnsw_index(integer, bigint, boolean, name);
