-- Term expansion for full_text search: the embedding of each word a generation indexes in
-- two chunks or more (the commonest spelling of its lexeme in the chunks), so that a
-- query can add the indexed words nearest to its own embedding to BM25's query at a
-- fraction of a word's weight (retrieval_config.term_expansion; docs/configuration.md).
-- The worker embeds a generation's new words when its queue is empty
-- (kb.refresh_term_vectors); term_vector_state says how far that got.
CREATE TABLE kb.term_vector (
    index_id   bigint NOT NULL,
    kb_id      integer NOT NULL,
    lexeme     text NOT NULL,
    word       text,
    embedding  vector,
    PRIMARY KEY (index_id, lexeme, kb_id),
    FOREIGN KEY (index_id, kb_id) REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE
);
COMMENT ON TABLE kb.term_vector IS
  'Term expansion (full_text): the embedding of each word a generation indexes in two '
  'chunks or more, as its commonest spelling (none where no word stems to the lexeme '
  'alone); kb.refresh_term_vectors fills it.';

CREATE TABLE kb.term_vector_state (
    index_id   bigint NOT NULL,
    kb_id      integer NOT NULL,
    seen       text NOT NULL,
    refreshed_at timestamptz NOT NULL DEFAULT now(),
    error      text,
    PRIMARY KEY (index_id, kb_id),
    FOREIGN KEY (index_id, kb_id) REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE
);
COMMENT ON TABLE kb.term_vector_state IS
  'How far kb.refresh_term_vectors got for a generation: its chunk count and total length '
  'when last refreshed (seen), and the last refresh''s error.';

-- Row-level security, policies and privileges: sql/990-privileges.sql, as for every table
-- an index generation builds (kbpg_db.config.SEARCH_TABLES).

-- BM25's scorers take the expansion's terms and weights (sql/300-bm25.sql): the old
-- signatures go, the SQL files create the new ones.
DROP FUNCTION IF EXISTS kb._bm25_search(integer, bigint, text, integer, double precision,
                                        double precision, jsonb);
DROP FUNCTION IF EXISTS kb._py_bm25_search(integer, bigint, text, integer, double precision,
                                           double precision, jsonb, integer);
