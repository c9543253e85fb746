-- Per-document chunking (seed 003's ChunkingOverride): a document may carry its own chunker
-- settings over its KB's indexing_config, kept across reindexes (kb.set_document_chunking).
ALTER TABLE kb.document ADD COLUMN chunking jsonb;
COMMENT ON COLUMN kb.document.chunking IS
  'This document''s chunking settings over its KB''s indexing_config (chunker, chunk_size, '
  '...; never the model or dimension), validated when written and kept across reindexes.';
