-- Replacing a document deletes its chunks of one index generation: index that lookup.
CREATE INDEX chunk_document_index_idx ON kb.chunk (document_id, index_id);
DROP INDEX kb.chunk_document_idx;
