-- The write path addresses one KB's rows too (README "Beyond one machine"): a job is
-- claimed, run, failed, released and renewed by its kb_id and id, a claim takes one KB's
-- jobs, and the internals that build, store, activate and drop an index generation take
-- the KB's id first. Their old signatures go; sql/ recreates them.
DROP FUNCTION IF EXISTS kb.process_job(bigint, text);
DROP FUNCTION IF EXISTS kb.fail_job(bigint, text, text);
DROP FUNCTION IF EXISTS kb.release_job(bigint, text);
DROP FUNCTION IF EXISTS kb.renew_leases(bigint[], text);
DROP FUNCTION IF EXISTS kb.prefetch_embeddings(bigint[], text);
DROP FUNCTION IF EXISTS kb._py_prefetch_embeddings(bigint[], text);
DROP FUNCTION IF EXISTS kb._fail_job(bigint, text, boolean);
DROP FUNCTION IF EXISTS kb._cancel_job(bigint, text);
DROP FUNCTION IF EXISTS kb._store_page_index(bigint, bigint, jsonb, jsonb);
DROP FUNCTION IF EXISTS kb._store_graph_index(bigint, bigint, jsonb, jsonb);
DROP FUNCTION IF EXISTS kb._store_doc2json(bigint, bigint, jsonb, jsonb);
DROP FUNCTION IF EXISTS kb._store_knowledge_graph(bigint, bigint, jsonb, jsonb);
DROP FUNCTION IF EXISTS kb._store_chunk_embed(bigint, bigint, jsonb, jsonb);
DROP FUNCTION IF EXISTS kb._communities_stale(bigint[]);
DROP FUNCTION IF EXISTS kb._hnsw_index(bigint, boolean, name);
DROP FUNCTION IF EXISTS kb._clear_index(bigint);
DROP FUNCTION IF EXISTS kb._drop_index(bigint);
DROP FUNCTION IF EXISTS kb._maybe_activate(bigint);
DROP FUNCTION IF EXISTS kb._convert_document(bigint);
DROP FUNCTION IF EXISTS kb._py_convert_document(bigint);
DROP FUNCTION IF EXISTS kb._py_refresh_communities(bigint, jsonb);

-- A claim looks for one KB's runnable jobs, oldest first.
CREATE INDEX IF NOT EXISTS job_claim_kb_idx ON kb.job (kb_id, run_after, id)
  WHERE status IN ('queued', 'running');
