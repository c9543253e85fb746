-- Who may write what kbpg builds, in one place (applied on every install and upgrade).
--
-- Every role may use kbpg, and row-level security decides which rows it sees and changes
-- (migration 007): documents, jobs and index generations of the KBs it may write. What is
-- built from the documents (chunks, vectors, BM25 postings and statistics, the strategies'
-- tables) is written by kbpg's indexing worker, which connects as the schema's owner, and
-- removed with its document or generation by ON DELETE CASCADE (which PostgreSQL runs as
-- the tables' owner). No other role may write those tables: a raw INSERT or DELETE there
-- is refused, so a chunk can never lack its vector, postings or statistics.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON
  kb.chunk, kb.embedding, kb.posting, kb.term_stat,
  kb.page_index_node, kb.page_index_toc, kb.graph_index_edge, kb.doc2json_document,
  kb.graph_node, kb.graph_edge, kb.graph_entity_merge, kb.graph_community,
  kb.graph_community_state
FROM PUBLIC;

-- SECURITY DEFINER trigger functions run only as their triggers; nobody calls them.
-- They keep what a cascade or a member's document change implies (HNSW indexes, BM25
-- statistics, chunk metadata, stale communities) in step, whoever made the change.
REVOKE EXECUTE ON FUNCTION kb._kb_index_hnsw(), kb._document_metadata_sync(),
  kb._chunk_after_insert(), kb._chunk_after_delete(), kb._kb_index_after_delete(),
  kb._graph_node_gone() FROM PUBLIC;

-- The internal SECURITY DEFINER functions left callable by every role are lookups that
-- row-level policies and kbpg's own SQL functions evaluate with the caller's rights, so
-- they must stay executable; each answers only for a role the session may act as
-- (pg_has_role(session_user, ...)) or by a key only the caller can know, and changes
-- nothing: kb._readable_kbs, kb._readable_indexes, kb._team_name, kb._kb_name_taken,
-- kb._llm_cache_get and kb._server_setting (tests/integration/test_security.py calls each
-- as a role in no team).
