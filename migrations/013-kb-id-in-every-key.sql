-- Every per-KB table carries its knowledge base's id and has it in its primary key, its
-- unique constraints and its foreign keys to other per-KB tables, so that each can be
-- distributed by kb_id and co-located (Citus: README "Beyond one machine").
-- tests/integration/test_schema.py checks this invariant over the catalog.
--
-- kb_id goes last in keys that served lookups before, so every index keeps the order
-- the queries read it in (posting's covering key above all); an index id or row id
-- already determines the KB, so no key becomes weaker.

-- Every lock first: on a live database (workers indexing) kbpg migrate then waits and
-- retries before the rewrite rather than after it.
LOCK TABLE kb.knowledge_base, kb.kb_index, kb.document, kb.document_file, kb.document_media,
           kb.chunk, kb.embedding, kb.posting, kb.term_stat, kb.job, kb.doc2json_document,
           kb.graph_community, kb.graph_community_state, kb.graph_edge, kb.graph_entity_merge,
           kb.graph_index_edge, kb.graph_node, kb.page_index_node, kb.page_index_toc
  IN ACCESS EXCLUSIVE MODE;

-- 1. The old keys go: foreign keys first, then the primary and unique keys they lean on
-- (dropped before the rewrite below, so it does not rebuild them only to drop them).
ALTER TABLE kb.knowledge_base DROP CONSTRAINT knowledge_base_active_index_fk;
ALTER TABLE kb.chunk DROP CONSTRAINT chunk_index_id_fkey,
                     DROP CONSTRAINT chunk_document_id_fkey;
ALTER TABLE kb.embedding DROP CONSTRAINT embedding_chunk_id_fkey;
ALTER TABLE kb.job DROP CONSTRAINT job_index_id_fkey,
                   DROP CONSTRAINT job_document_id_fkey;
ALTER TABLE kb.page_index_node DROP CONSTRAINT page_index_node_chunk_id_fkey,
                               DROP CONSTRAINT page_index_node_index_id_fkey,
                               DROP CONSTRAINT page_index_node_document_id_fkey;
ALTER TABLE kb.page_index_toc DROP CONSTRAINT page_index_toc_document_id_fkey,
                              DROP CONSTRAINT page_index_toc_index_id_fkey;
ALTER TABLE kb.graph_index_edge DROP CONSTRAINT graph_index_edge_index_id_fkey,
                                DROP CONSTRAINT graph_index_edge_document_id_fkey,
                                DROP CONSTRAINT graph_index_edge_source_chunk_id_fkey,
                                DROP CONSTRAINT graph_index_edge_target_chunk_id_fkey;
ALTER TABLE kb.document_file DROP CONSTRAINT document_file_document_id_fkey;
ALTER TABLE kb.doc2json_document DROP CONSTRAINT doc2json_document_chunk_id_fkey,
                                 DROP CONSTRAINT doc2json_document_index_id_fkey,
                                 DROP CONSTRAINT doc2json_document_document_id_fkey;
ALTER TABLE kb.graph_node DROP CONSTRAINT graph_node_index_id_fkey,
                          DROP CONSTRAINT graph_node_chunk_id_fkey,
                          DROP CONSTRAINT graph_node_document_id_fkey;
ALTER TABLE kb.graph_edge DROP CONSTRAINT graph_edge_source_id_fkey,
                          DROP CONSTRAINT graph_edge_index_id_fkey,
                          DROP CONSTRAINT graph_edge_document_id_fkey,
                          DROP CONSTRAINT graph_edge_chunk_id_fkey,
                          DROP CONSTRAINT graph_edge_target_id_fkey;
ALTER TABLE kb.graph_entity_merge DROP CONSTRAINT graph_entity_merge_index_id_fkey;
ALTER TABLE kb.graph_community DROP CONSTRAINT graph_community_index_id_fkey;
ALTER TABLE kb.graph_community_state DROP CONSTRAINT graph_community_state_index_id_fkey;
ALTER TABLE kb.document_media DROP CONSTRAINT document_media_document_id_fkey;

ALTER TABLE kb.kb_index DROP CONSTRAINT kb_index_pkey;
ALTER TABLE kb.document DROP CONSTRAINT document_pkey;
ALTER TABLE kb.chunk DROP CONSTRAINT chunk_pkey, DROP CONSTRAINT chunk_index_id_document_id_ordinal_key;
ALTER TABLE kb.embedding DROP CONSTRAINT embedding_pkey;
ALTER TABLE kb.posting DROP CONSTRAINT posting_pkey;
ALTER TABLE kb.term_stat DROP CONSTRAINT term_stat_pkey;
ALTER TABLE kb.job DROP CONSTRAINT job_pkey;
ALTER TABLE kb.document_file DROP CONSTRAINT document_file_pkey;
ALTER TABLE kb.doc2json_document DROP CONSTRAINT doc2json_document_pkey;
ALTER TABLE kb.page_index_node DROP CONSTRAINT page_index_node_pkey;
ALTER TABLE kb.page_index_toc DROP CONSTRAINT page_index_toc_pkey;
ALTER TABLE kb.graph_index_edge DROP CONSTRAINT graph_index_edge_pkey;
ALTER TABLE kb.graph_node DROP CONSTRAINT graph_node_pkey, DROP CONSTRAINT graph_node_index_id_document_id_local_id_key;
ALTER TABLE kb.graph_edge DROP CONSTRAINT graph_edge_pkey;
ALTER TABLE kb.graph_entity_merge DROP CONSTRAINT graph_entity_merge_pkey;
DROP INDEX kb.graph_entity_merge_one_canonical;
ALTER TABLE kb.graph_community DROP CONSTRAINT graph_community_pkey, DROP CONSTRAINT graph_community_index_id_signature_key;
ALTER TABLE kb.graph_community_state DROP CONSTRAINT graph_community_state_pkey;

-- 2. The column, filled from the row's index generation. Each table is rewritten once
-- with its indexes rebuilt (ALTER ... TYPE ... USING), rather than updated row by row
-- (which would add every row to every index again, the HNSW graph included, and leave
-- the old versions behind). About a minute per million postings here.
CREATE FUNCTION pg_temp.kb_of_index(p_index_id bigint) RETURNS integer
LANGUAGE sql STABLE AS 'SELECT kb_id FROM kb.kb_index WHERE id = p_index_id';
DO $$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['chunk', 'embedding', 'posting', 'term_stat', 'doc2json_document',
                           'graph_community', 'graph_community_state', 'graph_edge',
                           'graph_entity_merge', 'graph_index_edge', 'graph_node',
                           'page_index_node', 'page_index_toc'] LOOP
    EXECUTE format('ALTER TABLE kb.%I ADD COLUMN kb_id integer', t);
    EXECUTE format('ALTER TABLE kb.%I ALTER COLUMN kb_id TYPE integer '
                   'USING pg_temp.kb_of_index(index_id), ALTER COLUMN kb_id SET NOT NULL', t);
  END LOOP;
END
$$;

-- 3. Primary keys and unique constraints with kb_id.
ALTER TABLE kb.kb_index ADD PRIMARY KEY (id, kb_id);
ALTER TABLE kb.document ADD PRIMARY KEY (id, kb_id);
ALTER TABLE kb.chunk ADD PRIMARY KEY (id, kb_id), ADD UNIQUE (index_id, document_id, ordinal, kb_id);
ALTER TABLE kb.embedding ADD PRIMARY KEY (chunk_id, kb_id);
ALTER TABLE kb.posting ADD PRIMARY KEY (index_id, lexeme, chunk_id, kb_id) INCLUDE (tf, dl);
ALTER TABLE kb.term_stat ADD PRIMARY KEY (index_id, lexeme, kb_id);
ALTER TABLE kb.job ADD PRIMARY KEY (id, kb_id);
ALTER TABLE kb.document_file ADD PRIMARY KEY (document_id, kb_id);
ALTER TABLE kb.doc2json_document ADD PRIMARY KEY (index_id, document_id, kb_id);
ALTER TABLE kb.page_index_node ADD PRIMARY KEY (index_id, document_id, node_id, kb_id);
ALTER TABLE kb.page_index_toc ADD PRIMARY KEY (index_id, document_id, kb_id);
ALTER TABLE kb.graph_index_edge ADD PRIMARY KEY (source_chunk_id, target_chunk_id, kb_id);
ALTER TABLE kb.graph_node ADD PRIMARY KEY (id, kb_id), ADD UNIQUE (index_id, document_id, local_id, kb_id);
ALTER TABLE kb.graph_edge ADD PRIMARY KEY (id, kb_id);
ALTER TABLE kb.graph_entity_merge ADD PRIMARY KEY (index_id, key, other_key, kb_id);
CREATE UNIQUE INDEX graph_entity_merge_one_canonical
  ON kb.graph_entity_merge (index_id, key, kb_id) WHERE merged;
ALTER TABLE kb.graph_community ADD PRIMARY KEY (id, kb_id), ADD UNIQUE (index_id, signature, kb_id);
ALTER TABLE kb.graph_community_state ADD PRIMARY KEY (index_id, kb_id);

-- 4. Foreign keys between per-KB tables as (row, kb_id) pairs. The active generation
-- must now also belong to its own KB.
ALTER TABLE kb.knowledge_base ADD CONSTRAINT knowledge_base_active_index_fk
  FOREIGN KEY (active_index_id, id) REFERENCES kb.kb_index (id, kb_id) DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE kb.chunk
  ADD CONSTRAINT chunk_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT chunk_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.embedding
  ADD CONSTRAINT embedding_chunk_id_fkey FOREIGN KEY (chunk_id, kb_id)
      REFERENCES kb.chunk (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.job
  ADD CONSTRAINT job_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT job_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.document_file
  ADD CONSTRAINT document_file_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.document_media
  ADD CONSTRAINT document_media_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.page_index_node
  ADD CONSTRAINT page_index_node_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT page_index_node_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT page_index_node_chunk_id_fkey FOREIGN KEY (chunk_id, kb_id)
      REFERENCES kb.chunk (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.page_index_toc
  ADD CONSTRAINT page_index_toc_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT page_index_toc_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.graph_index_edge
  ADD CONSTRAINT graph_index_edge_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT graph_index_edge_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT graph_index_edge_source_chunk_id_fkey FOREIGN KEY (source_chunk_id, kb_id)
      REFERENCES kb.chunk (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT graph_index_edge_target_chunk_id_fkey FOREIGN KEY (target_chunk_id, kb_id)
      REFERENCES kb.chunk (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.doc2json_document
  ADD CONSTRAINT doc2json_document_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT doc2json_document_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT doc2json_document_chunk_id_fkey FOREIGN KEY (chunk_id, kb_id)
      REFERENCES kb.chunk (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.graph_node
  ADD CONSTRAINT graph_node_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT graph_node_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE,
  -- A vertex outlives its chunk: only chunk_id is cleared (PostgreSQL 15's column list).
  ADD CONSTRAINT graph_node_chunk_id_fkey FOREIGN KEY (chunk_id, kb_id)
      REFERENCES kb.chunk (id, kb_id) ON DELETE SET NULL (chunk_id);
ALTER TABLE kb.graph_edge
  ADD CONSTRAINT graph_edge_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT graph_edge_document_id_fkey FOREIGN KEY (document_id, kb_id)
      REFERENCES kb.document (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT graph_edge_chunk_id_fkey FOREIGN KEY (chunk_id, kb_id)
      REFERENCES kb.chunk (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT graph_edge_source_id_fkey FOREIGN KEY (source_id, kb_id)
      REFERENCES kb.graph_node (id, kb_id) ON DELETE CASCADE,
  ADD CONSTRAINT graph_edge_target_id_fkey FOREIGN KEY (target_id, kb_id)
      REFERENCES kb.graph_node (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.graph_entity_merge
  ADD CONSTRAINT graph_entity_merge_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.graph_community
  ADD CONSTRAINT graph_community_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE;
ALTER TABLE kb.graph_community_state
  ADD CONSTRAINT graph_community_state_index_id_fkey FOREIGN KEY (index_id, kb_id)
      REFERENCES kb.kb_index (id, kb_id) ON DELETE CASCADE;

-- The rewrite leaves the planner without statistics for the new keys: without them BM25's
-- queries were planned 10x slower until autovacuum came round.
ANALYZE kb.kb_index, kb.document, kb.chunk, kb.embedding, kb.posting, kb.term_stat, kb.job,
        kb.doc2json_document, kb.graph_community, kb.graph_community_state, kb.graph_edge,
        kb.graph_entity_merge, kb.graph_index_edge, kb.graph_node, kb.page_index_node,
        kb.page_index_toc, kb.document_file, kb.document_media;
