-- GraphIndex's cross-references are named for what they are, apart from the knowledge
-- graph's vertices and edges (kb.graph_node, kb.graph_edge): the table
-- kb.graph_index_edge becomes kb.graph_index_reference (its view, in sql/260, becomes
-- kb.graph_index_references), and the retrieval setting graph_expansion becomes
-- reference_expansion in every stored configuration.
ALTER TABLE kb.graph_index_edge RENAME TO graph_index_reference;
ALTER TABLE kb.graph_index_reference RENAME CONSTRAINT graph_index_edge_kind_check
  TO graph_index_reference_kind_check;
ALTER TABLE kb.graph_index_reference RENAME CONSTRAINT graph_index_edge_resolved_by_check
  TO graph_index_reference_resolved_by_check;
ALTER TABLE kb.graph_index_reference RENAME CONSTRAINT graph_index_edge_index_id_fkey
  TO graph_index_reference_index_id_fkey;
ALTER TABLE kb.graph_index_reference RENAME CONSTRAINT graph_index_edge_document_id_fkey
  TO graph_index_reference_document_id_fkey;
ALTER TABLE kb.graph_index_reference RENAME CONSTRAINT graph_index_edge_source_chunk_id_fkey
  TO graph_index_reference_source_chunk_id_fkey;
ALTER TABLE kb.graph_index_reference RENAME CONSTRAINT graph_index_edge_target_chunk_id_fkey
  TO graph_index_reference_target_chunk_id_fkey;
ALTER INDEX kb.graph_index_edge_pkey RENAME TO graph_index_reference_pkey;
ALTER INDEX kb.graph_index_edge_target_idx RENAME TO graph_index_reference_target_idx;
ALTER INDEX kb.graph_index_edge_document_idx RENAME TO graph_index_reference_document_idx;
DROP VIEW IF EXISTS kb.graph_index_edges;

-- The stored settings are renamed as they are. The trigger that validates a changed
-- retrieval_config (sql/100) is off meanwhile: the value is the same, under its new name.
LOCK TABLE kb.knowledge_base IN SHARE ROW EXCLUSIVE MODE;
DO $$
BEGIN
  IF EXISTS (SELECT FROM kb.knowledge_base WHERE retrieval_config ? 'graph_expansion') THEN
    -- As a replica applies rows: the check trigger does not run, and no foreign-key
    -- check is queued (an ALTER TABLE ... DISABLE TRIGGER here failed on "pending
    -- trigger events" where an earlier migration of the same upgrade changed the row).
    PERFORM set_config('session_replication_role', 'replica', true);
    UPDATE kb.knowledge_base
       SET retrieval_config = (retrieval_config - 'graph_expansion')
           || jsonb_build_object('reference_expansion', retrieval_config->'graph_expansion')
     WHERE retrieval_config ? 'graph_expansion';
    PERFORM set_config('session_replication_role', 'origin', true);
  END IF;
END
$$;
UPDATE kb.setting
   SET value = (value - 'graph_expansion')
       || jsonb_build_object('reference_expansion', value->'graph_expansion')
 WHERE name = 'retrieval_config' AND value ? 'graph_expansion';
UPDATE kb.test_run
   SET config = (config - 'graph_expansion')
       || jsonb_build_object('reference_expansion', config->'graph_expansion')
 WHERE config ? 'graph_expansion';
