-- The posting primary key carries tf and dl itself (INCLUDE), so BM25 scoring stays an
-- index-only scan without a second, duplicate btree to maintain on every insert.
ALTER TABLE kb.posting
  DROP CONSTRAINT posting_pkey,
  ADD CONSTRAINT posting_pkey PRIMARY KEY (index_id, lexeme, chunk_id) INCLUDE (tf, dl);
DROP INDEX kb.posting_covering_idx;
