-- kb._py_bm25_search hands its hits back as one row of array literals (and the value of
-- kb.bm25_essential) instead of a set of rows that PL/Python converts value by value;
-- sql/300-bm25.sql recreates it with its new result type.
DROP FUNCTION IF EXISTS kb._py_bm25_search(integer, bigint, text, integer, double precision,
                                           double precision, jsonb, integer);
