-- The indexing job queue: enqueue, claim (FOR UPDATE SKIP LOCKED), run, fail and retry.
--
-- A job is addressed by its KB and its id: every statement below reads and writes one
-- KB's rows, kb_id fixed (docs/operations.md, "Beyond one machine": Citus runs each on the KB's node).
-- A claim takes jobs of one KB.

CREATE OR REPLACE FUNCTION kb._enqueue(p_kb_id integer, p_document_id bigint, p_index_id bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_job bigint;
BEGIN
  -- A newer version supersedes queued work; a running job finds the content changed
  -- and stands down (kb.process_job).
  UPDATE kb.job SET status = 'cancelled', finished_at = now(), last_error = 'superseded'
   WHERE kb_id = p_kb_id AND document_id = p_document_id AND index_id = p_index_id
     AND status = 'queued';
  INSERT INTO kb.job (kb_id, document_id, index_id, max_attempts)
  VALUES (p_kb_id, p_document_id, p_index_id,
          coalesce(nullif(current_setting('kb.max_attempts', true), '')::integer, 5))
  RETURNING id INTO v_job;
  RETURN v_job;
END
$$;
COMMENT ON FUNCTION kb._enqueue(integer, bigint, bigint) IS
  'Internal: queues (re)indexing of one document into one index generation.';

CREATE OR REPLACE FUNCTION kb._enqueue_document(p_kb kb.knowledge_base, p_document_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix bigint;
BEGIN
  -- The serving index, and a generation being built by a reindex, if any.
  FOR v_ix IN SELECT id FROM kb.kb_index
               WHERE kb_id = p_kb.id AND (id = p_kb.active_index_id OR status = 'building')
               ORDER BY id LOOP
    PERFORM kb._enqueue(p_kb.id, p_document_id, v_ix);
  END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION kb._job_notify() RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_n integer;
BEGIN
  SELECT count(*) INTO v_n FROM new_jobs WHERE status = 'queued';
  IF v_n > 0 THEN
    PERFORM pg_notify('kbpg_jobs', json_build_object('queued', v_n)::text);
  END IF;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER job_notify AFTER INSERT ON kb.job
  REFERENCING NEW TABLE AS new_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION kb._job_notify();

CREATE OR REPLACE FUNCTION kb.claim_jobs(worker text, max_jobs integer DEFAULT 1,
                                         lease_seconds double precision DEFAULT 60)
RETURNS SETOF kb.job
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb     integer;
  v_id     bigint;
  v_tried  integer[];
  v_n      integer;
  v_active bigint;
  v_claimed kb.job[];
  v_ids    bigint[];
BEGIN
  IF kb._blank(worker) THEN
    RAISE EXCEPTION 'worker must name the worker claiming the jobs'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF max_jobs IS NULL OR max_jobs NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'max_jobs must be between 1 and 1000 (got %)', coalesce(max_jobs::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF lease_seconds IS NULL OR lease_seconds <= 0 OR lease_seconds > 86400 THEN
    RAISE EXCEPTION 'lease_seconds must be more than 0 and at most 86400 (got %)',
                    coalesce(lease_seconds::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- Jobs whose worker died after its last allowed attempt: give up on them.
  FOR v_kb, v_id IN
    SELECT j.kb_id, j.id FROM kb.job j
     WHERE j.status = 'running' AND j.locked_until < now() AND j.attempts >= j.max_attempts
  LOOP
    PERFORM 1 FROM kb.job j
     WHERE j.kb_id = v_kb AND j.id = v_id AND j.status = 'running'
       AND j.locked_until < now() AND j.attempts >= j.max_attempts
       FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
      PERFORM kb._fail_job(v_kb, v_id, coalesce(
        (SELECT j.last_error FROM kb.job j WHERE j.kb_id = v_kb AND j.id = v_id),
        'the worker running it stopped (lease expired)'), true);
    END IF;
  END LOOP;
  -- One KB's jobs per claim: first the KB of the job due longest; when another worker
  -- holds all of that KB's due jobs, the others in the order of their oldest due job.
  SELECT j.kb_id INTO v_kb FROM kb.job j
   WHERE (j.status = 'queued' AND j.run_after <= now())
      OR (j.status = 'running' AND j.locked_until < now())
   ORDER BY j.run_after, j.id LIMIT 1;
  IF v_kb IS NULL THEN
    RETURN;
  END IF;
  v_tried := ARRAY[v_kb];
  LOOP
    -- Oldest first; but at the end of a KB's queue (at most 64 jobs due) the largest
    -- documents first (a file not converted yet counts as large), so that the workers'
    -- connections run out of work together instead of one idling while another indexes
    -- the last large document. Nothing waits longer than those 64 jobs for it.
    IF (SELECT count(*) FROM (SELECT 1 FROM kb.job j
                               WHERE j.kb_id = v_kb
                                 AND ((j.status = 'queued' AND j.run_after <= now())
                                      OR (j.status = 'running' AND j.locked_until < now()))
                               LIMIT 65) s) <= 64 THEN
      v_ids := ARRAY(
        SELECT j.id FROM kb.job j
          JOIN kb.document d ON d.kb_id = v_kb AND d.id = j.document_id
         WHERE j.kb_id = v_kb
           AND ((j.status = 'queued' AND j.run_after <= now())
                OR (j.status = 'running' AND j.locked_until < now()))
         ORDER BY octet_length(d.content) DESC NULLS FIRST, j.run_after, j.id
         LIMIT max_jobs
         FOR UPDATE OF j SKIP LOCKED);
    ELSE
      v_ids := ARRAY(
        SELECT j.id FROM kb.job j
         WHERE j.kb_id = v_kb
           AND ((j.status = 'queued' AND j.run_after <= now())
                OR (j.status = 'running' AND j.locked_until < now()))
         ORDER BY j.run_after, j.id
         LIMIT max_jobs
         FOR UPDATE SKIP LOCKED);
    END IF;
    WITH claimed AS (
      UPDATE kb.job j
         SET status = 'running', attempts = j.attempts + 1, locked_by = worker,
             locked_until = now() + make_interval(secs => claim_jobs.lease_seconds),
             started_at = now(), lease_seconds = claim_jobs.lease_seconds
       WHERE j.kb_id = v_kb AND j.id = ANY (v_ids)
      RETURNING j.*
    )
    SELECT array_agg(claimed), count(*) INTO v_claimed, v_n FROM claimed;
    EXIT WHEN v_n > 0;
    SELECT j.kb_id INTO v_kb FROM kb.job j
     WHERE ((j.status = 'queued' AND j.run_after <= now())
            OR (j.status = 'running' AND j.locked_until < now()))
       AND j.kb_id <> ALL (v_tried)
     GROUP BY j.kb_id ORDER BY min(j.run_after) LIMIT 1;
    IF NOT FOUND THEN
      RETURN;
    END IF;
    v_tried := v_tried || v_kb;
  END LOOP;
  SELECT active_index_id INTO v_active FROM kb.knowledge_base WHERE id = v_kb;
  -- By the claimed jobs' documents (their keys): a join with the KB's running jobs would
  -- cost the queue's length for each pending document.
  UPDATE kb.document d SET status = 'indexing', updated_at = now()
   WHERE d.kb_id = v_kb AND d.status = 'pending'
     AND d.id = ANY (ARRAY(SELECT x.document_id FROM unnest(v_claimed) x
                            WHERE x.index_id = v_active));
  RETURN QUERY SELECT * FROM unnest(v_claimed);
END
$$;
COMMENT ON FUNCTION kb.claim_jobs(text, integer, double precision) IS
  'Claims up to max_jobs runnable jobs of one knowledge base for a worker (FOR UPDATE SKIP '
  'LOCKED): queued ones due now, and running ones whose lease expired (their worker died). '
  'The KB is the one whose job has waited longest, among those with a job no other worker holds; '
  'its jobs oldest first, or largest document first once at most 64 are due.';

CREATE OR REPLACE FUNCTION kb._fail_job(p_kb_id integer, p_job_id bigint, p_error text,
                                        p_final boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_job  kb.job;
  v_base double precision := coalesce(nullif(current_setting('kb.retry_base_seconds', true), '')::double precision, 2);
  v_active bigint;
BEGIN
  SELECT * INTO v_job FROM kb.job WHERE kb_id = p_kb_id AND id = p_job_id FOR UPDATE;
  IF NOT FOUND OR v_job.status NOT IN ('running', 'queued') THEN
    RETURN 'gone';
  END IF;
  SELECT active_index_id INTO v_active FROM kb.knowledge_base WHERE id = p_kb_id;
  IF p_final OR v_job.attempts >= v_job.max_attempts THEN
    UPDATE kb.job SET status = 'failed', last_error = p_error, finished_at = now(),
                      locked_by = NULL, locked_until = NULL
     WHERE kb_id = p_kb_id AND id = p_job_id;
    IF v_job.index_id = v_active THEN
      UPDATE kb.document SET status = 'error', error = p_error, attempts = v_job.attempts,
                             updated_at = now()
       WHERE kb_id = p_kb_id AND id = v_job.document_id;
    ELSE
      -- A reindex that cannot index one document fails whole; the old generation serves on.
      PERFORM kb._lock_index_stats(ARRAY[v_job.index_id]);
      UPDATE kb.kb_index SET status = 'failed',
             error = format('document %s: %s', v_job.document_id, p_error)
       WHERE kb_id = p_kb_id AND id = v_job.index_id AND status = 'building';
      UPDATE kb.job SET status = 'cancelled', finished_at = now(), last_error = 'reindex failed'
       WHERE kb_id = p_kb_id AND index_id = v_job.index_id AND status = 'queued';
      PERFORM kb._clear_index(p_kb_id, v_job.index_id);
    END IF;
    RETURN 'failed';
  END IF;
  UPDATE kb.job
     SET status = 'queued', last_error = p_error, locked_by = NULL, locked_until = NULL,
         -- From now, not the transaction's start: a failing step may have run for long.
         run_after = clock_timestamp()
                     + make_interval(secs => least(v_base * 2 ^ (v_job.attempts - 1), 600))
   WHERE kb_id = p_kb_id AND id = p_job_id;
  IF v_job.index_id = v_active THEN
    UPDATE kb.document SET status = 'pending', error = p_error, attempts = v_job.attempts,
                           updated_at = now()
     WHERE kb_id = p_kb_id AND id = v_job.document_id;
  END IF;
  RETURN 'retry';
END
$$;

CREATE OR REPLACE FUNCTION kb._job_verdict(p_verdict text) RETURNS kb.job_outcome
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT (CASE p_verdict WHEN 'gone' THEN 'lost' ELSE p_verdict END)::kb.job_outcome $$;
COMMENT ON FUNCTION kb._job_verdict(text) IS
  'Internal: kb._fail_job''s verdict (retry, failed, gone) as a job outcome.';

CREATE OR REPLACE FUNCTION kb.fail_job(kb_id integer, job_id bigint, worker text, error text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM kb.job j
                  WHERE j.kb_id = fail_job.kb_id AND j.id = job_id AND j.locked_by = worker) THEN
    RETURN 'lost';
  END IF;
  RETURN kb._fail_job(fail_job.kb_id, job_id, left(error, 4000));
END
$$;
COMMENT ON FUNCTION kb.fail_job(integer, bigint, text, text) IS
  'Records a job failure: queued again with exponential backoff (kb.retry_base_seconds, '
  'default 2 s) until max_attempts, then failed, with the error on the job and the document.';

CREATE OR REPLACE FUNCTION kb.release_job(kb_id integer, job_id bigint, worker text)
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  UPDATE kb.job j SET status = 'queued', locked_by = NULL, locked_until = NULL,
                      attempts = greatest(j.attempts - 1, 0), run_after = now()
   WHERE j.kb_id = release_job.kb_id AND j.id = release_job.job_id
     AND j.locked_by = release_job.worker AND j.status = 'running'
  RETURNING true
$$;
COMMENT ON FUNCTION kb.release_job(integer, bigint, text) IS
  'Hands a running job back to the queue (a worker stopping between steps of a long job); '
  'the attempt does not count, and its cached LLM answers carry the next run.';

CREATE OR REPLACE FUNCTION kb._cancel_job(p_kb_id integer, p_job_id bigint, p_reason text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  UPDATE kb.job SET status = 'cancelled', finished_at = now(), locked_by = NULL,
                    last_error = p_reason
   WHERE kb_id = p_kb_id AND id = p_job_id
$$;
COMMENT ON FUNCTION kb._cancel_job(integer, bigint, text) IS
  'Internal: a job that has nothing left to do (generation gone, document superseded).';

CREATE OR REPLACE FUNCTION kb.process_job(kb_id integer, job_id bigint, worker text)
RETURNS kb.job_outcome
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_job  kb.job;
  v_doc  kb.document;
  v_ix   kb.kb_index;
  v_res  kb.build_result;
  v_n    integer;
  v_active bigint;
  v_use  jsonb;
  v_ids  jsonb;
  v_err  text;
  v_kb   integer;
  v_hw   integer;
  v_origin jsonb;
BEGIN
  -- The row lock is held until this transaction ends: while this backend works, no
  -- other worker can claim the job, even if its lease runs out.
  SELECT * INTO v_job FROM kb.job j
   WHERE j.kb_id = process_job.kb_id AND j.id = process_job.job_id FOR UPDATE;
  IF NOT FOUND OR v_job.status <> 'running' OR v_job.locked_by IS DISTINCT FROM worker THEN
    RETURN 'lost';
  END IF;
  v_kb := v_job.kb_id;
  SELECT * INTO v_doc FROM kb.document d WHERE d.kb_id = v_kb AND d.id = v_job.document_id;
  SELECT * INTO v_ix FROM kb.kb_index i WHERE i.kb_id = v_kb AND i.id = v_job.index_id;
  IF v_ix.status NOT IN ('active', 'building') THEN
    PERFORM kb._cancel_job(v_kb, v_job.id, 'index generation ' || v_ix.status);
    RETURN 'cancelled';
  END IF;

  -- A file or web page (kb.add_file, kb.add_url) is converted to text first, from its
  -- stored original at every job's first step, so a reindex uses today's converter with
  -- no re-upload. What cannot be converted fails the document at once: trying again
  -- converts the same bytes the same way.
  IF v_doc.source_format IS NOT NULL AND (v_job.steps = 0 OR v_doc.content IS NULL) THEN
    v_err := kb._convert_document(v_kb, v_doc.id);
    IF v_err IS NOT NULL THEN
      RETURN kb._job_verdict(kb._fail_job(v_kb, v_job.id, left(v_err, 4000), true));
    END IF;
    SELECT * INTO v_doc FROM kb.document d WHERE d.kb_id = v_kb AND d.id = v_job.document_id;
    IF v_doc.content IS NULL THEN  -- a newer version arrived while this one converted
      PERFORM kb._cancel_job(v_kb, v_job.id, 'superseded by a newer version');
      RETURN 'superseded';
    END IF;
  END IF;

  -- Compute first (slow, no shared locks held), then write (short). An LLM strategy
  -- computes in steps: each step caches its answers and commits ('more').
  -- The document's own chunking settings, if any, over its generation's config.
  v_res := kb._build_document(v_doc.title, v_doc.content,
                              v_ix.indexing_config || coalesce(v_doc.chunking, '{}'),
                              -- What conversion found (pages, outline) under the metadata.
                              v_doc.page_starts, coalesce(v_doc.source_meta, '{}') || v_doc.metadata,
                              -- The original file, only for a strategy that reads it.
                              CASE WHEN v_ix.indexing_config->>'strategy' = 'doc2json'
                                        AND v_ix.indexing_config->'extra'->>'mode' = 'image'
                                   THEN (SELECT f.data FROM kb.document_file f
                                          WHERE f.kb_id = v_kb AND f.document_id = v_doc.id)
                              END,
                              v_ix.id, v_kb);
  v_use := coalesce(v_res.usage, '{}');
  UPDATE kb.job
     SET steps = steps + 1, progress = v_res.progress,
         llm_calls = llm_calls + coalesce((v_use->>'calls')::integer, 0),
         -- Answers cached by this job's earlier steps are this step's hits: not free ones.
         llm_cache_hits = greatest(coalesce((v_use->>'cache_hits')::integer, 0) - llm_calls, 0),
         llm_prompt_tokens = llm_prompt_tokens + coalesce((v_use->>'prompt_tokens')::bigint, 0),
         llm_completion_tokens = llm_completion_tokens
                                 + coalesce((v_use->>'completion_tokens')::bigint, 0),
         llm_cost_usd = llm_cost_usd + CASE WHEN v_res.usage IS NULL THEN 0
                                            ELSE (v_use->>'cost_usd')::numeric END,
         -- From the step's end, not its start (now()): a step that outlasted the lease
         -- (a slow provider) would commit a lease already run out, and another worker
         -- could claim the job before this one's next step.
         locked_until = clock_timestamp() + make_interval(secs => kb.job.lease_seconds)
   WHERE kb.job.kb_id = v_kb AND id = v_job.id
   RETURNING * INTO v_job;
  IF v_res.status = 'more' THEN
    RETURN 'more';
  ELSIF v_res.status IN ('error', 'failed') THEN  -- failed: for good, no retry
    RETURN kb._job_verdict(kb._fail_job(v_kb, v_job.id, left(v_res.error, 4000),
                                        v_res.status = 'failed'));
  END IF;

  -- The write phase holds the generation's statistics lock (the chunk triggers take it
  -- too); a failing reindex takes it before clearing the generation, so this check
  -- cannot race it. No row lock on kb_index here: the triggers update that row.
  PERFORM kb._lock_index_stats(ARRAY[v_ix.id]);
  PERFORM 1 FROM kb.kb_index i
   WHERE i.kb_id = v_kb AND i.id = v_ix.id AND i.status IN ('active', 'building');
  IF NOT FOUND THEN
    PERFORM kb._cancel_job(v_kb, v_job.id, 'index generation no longer being built');
    RETURN 'cancelled';
  END IF;
  PERFORM 1 FROM kb.document d
   WHERE d.kb_id = v_kb AND d.id = v_doc.id AND d.content_hash = v_doc.content_hash FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM kb._cancel_job(v_kb, v_job.id, 'superseded by a newer version');
    RETURN 'superseded';
  END IF;
  -- A document's first build has nothing to replace: no DELETE, and so no statistics
  -- trigger on an empty statement (~0.15 ms of a small document's write phase).
  IF EXISTS (SELECT 1 FROM kb.chunk c
              WHERE c.kb_id = v_kb AND c.document_id = v_doc.id AND c.index_id = v_ix.id) THEN
    DELETE FROM kb.chunk c
     WHERE c.kb_id = v_kb AND c.document_id = v_doc.id AND c.index_id = v_ix.id;
  END IF;
  v_hw := kb._heading_weight(v_ix.indexing_config);
  -- Where each chunk's text sits on its pages, for a document whose conversion recorded
  -- it (a PDF or an image): its boxes, and OCR's confidence where OCR read it.
  IF v_doc.source_meta ? 'regions' THEN
    v_origin := kb._chunk_origins(v_doc.source_meta,
      (SELECT jsonb_agg(jsonb_build_array(c.ordinal, c.char_start, c.char_end))
         FROM unnest(v_res.chunks) c));
  END IF;
  WITH payload AS (
    SELECT c.*, kb.chunk_tsvector(v_ix.indexing_config, c.embed_text, c.heading_path) AS tsv
    FROM unnest(v_res.chunks) c
  ), ins AS (
    INSERT INTO kb.chunk (index_id, kb_id, document_id, ordinal, content, token_count,
                          heading_path, page, char_start, char_end, metadata, tsv, doc_len,
                          origin)
    SELECT v_ix.id, v_ix.kb_id, v_doc.id, p.ordinal, p.content, p.token_count, p.heading_path, p.page,
           p.char_start, p.char_end, v_doc.metadata, p.tsv,
           kb.tsvector_length(p.tsv, v_hw), v_origin->(p.ordinal::text)
    FROM payload p
    RETURNING id, ordinal
  ), vec AS (
    INSERT INTO kb.embedding (chunk_id, index_id, kb_id, embedding)
    -- p.embedding is pgvector's text form (kbpg_db.embedding.vector_literal).
    SELECT ins.id, v_ix.id, v_ix.kb_id, p.embedding::vector
    FROM ins JOIN payload p USING (ordinal)
    WHERE p.embedding IS NOT NULL
  )
  SELECT count(*), coalesce(jsonb_object_agg(ins.ordinal::text, ins.id), '{}')
    INTO v_n, v_ids FROM ins;
  -- The strategy's own tables (kb._store_<strategy>), with the new chunks' ids.
  IF v_res.artifacts IS NOT NULL THEN
    EXECUTE format('SELECT kb.%I($1, $2, $3, $4, $5)',
                   '_store_' || (v_ix.indexing_config->>'strategy'))
      USING v_kb, v_ix.id, v_doc.id, v_res.artifacts, v_ids;
  END IF;

  UPDATE kb.job j SET status = 'done', finished_at = now(), locked_by = NULL,
                      locked_until = NULL, last_error = NULL
   WHERE j.kb_id = v_kb AND j.id = v_job.id;
  SELECT active_index_id INTO v_active FROM kb.knowledge_base WHERE id = v_kb;
  IF v_ix.id = v_active THEN
    UPDATE kb.document d
       SET status = 'ready', error = NULL, chunk_count = v_n, attempts = v_job.attempts,
           tokens_embedded = v_res.tokens, embedding_cost_usd = v_res.cost_usd,
           llm_calls = v_job.llm_calls, llm_cache_hits = v_job.llm_cache_hits,
           llm_prompt_tokens = v_job.llm_prompt_tokens,
           llm_completion_tokens = v_job.llm_completion_tokens, llm_cost_usd = v_job.llm_cost_usd,
           indexed_at = now(), updated_at = now()
     WHERE d.kb_id = v_kb AND d.id = v_doc.id;
  ELSE
    PERFORM kb._maybe_activate(v_kb, v_ix.id);
  END IF;
  RETURN 'done';
END
$$;
COMMENT ON FUNCTION kb.process_job(integer, bigint, text) IS
  'Indexes the document of a claimed job with its KB''s strategy: compute (PL/Python: chunk '
  'and embed, or build a tree with the LLM), then swap the document''s chunks, vectors, BM25 '
  'postings and strategy tables in one transaction; searches see the old or the new, never a '
  'mix. An LLM job runs in steps: ''more'' means a step committed its cached answers and the '
  'worker should call again. Returns a kb.job_outcome.';

CREATE OR REPLACE FUNCTION kb.renew_leases(kb_id integer, job_ids bigint[], worker text)
RETURNS integer
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  WITH renewed AS (
    -- clock_timestamp(): kb.prefetch_embeddings renews after minutes of embedding, in
    -- one transaction, whose now() is its start.
    UPDATE kb.job j SET locked_until = clock_timestamp() + make_interval(secs => j.lease_seconds)
     WHERE j.kb_id = renew_leases.kb_id AND j.id = ANY (renew_leases.job_ids)
       AND j.locked_by = renew_leases.worker AND j.status = 'running'
    RETURNING 1
  )
  SELECT count(*)::integer FROM renewed
$$;
COMMENT ON FUNCTION kb.renew_leases(integer, bigint[], text) IS
  'Starts the leases of a worker''s claimed jobs of one KB again (jobs claimed together wait '
  'their turn); returns how many it still holds.';

CREATE OR REPLACE FUNCTION kb.prefetch_embeddings(kb_id integer, job_ids bigint[], worker text)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ids bigint[];
  v_n   integer;
BEGIN
  IF kb._blank(worker) THEN
    RAISE EXCEPTION 'worker must name the worker that claimed the jobs'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- The jobs' rows stay locked while their chunks are embedded, as in kb.process_job:
  -- no other worker claims them meanwhile, and their leases start again afterwards.
  SELECT array_agg(s.id ORDER BY s.id) INTO v_ids
    FROM (SELECT j.id FROM kb.job j
           WHERE j.kb_id = prefetch_embeddings.kb_id AND j.id = ANY (prefetch_embeddings.job_ids)
             AND j.locked_by = worker AND j.status = 'running'
           FOR UPDATE) s;
  IF v_ids IS NULL THEN
    RETURN 0;
  END IF;
  v_n := kb._py_prefetch_embeddings(prefetch_embeddings.kb_id, v_ids, worker);
  PERFORM kb.renew_leases(prefetch_embeddings.kb_id, v_ids, worker);
  RETURN v_n;
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb.prefetch_embeddings(integer, bigint[], text) IS
  'For a worker that claimed several jobs of a KB: chunks their documents and embeds all the '
  'chunks together (full batches; a remote provider gets a few requests instead of one per '
  'document), keeping the vectors in this connection for the jobs'' kb.process_job calls, '
  'which follow on the same connection. ChunkEmbed documents with their text at hand take '
  'part; errors are left for each job to report. Returns the chunks embedded ahead.';

CREATE OR REPLACE FUNCTION kb.queue_status()
RETURNS TABLE (kb text, queued bigint, running bigint, failed bigint, done bigint,
               oldest_queued_age interval, expired_leases bigint)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT k.name,
         count(*) FILTER (WHERE j.status = 'queued'),
         count(*) FILTER (WHERE j.status = 'running'),
         count(*) FILTER (WHERE j.status = 'failed'),
         count(*) FILTER (WHERE j.status = 'done'),
         now() - min(j.created_at) FILTER (WHERE j.status = 'queued'),
         count(*) FILTER (WHERE j.status = 'running' AND j.locked_until < now())
  FROM kb.knowledge_base k LEFT JOIN kb.job j ON j.kb_id = k.id
  GROUP BY k.name ORDER BY k.name
$$;
COMMENT ON FUNCTION kb.queue_status() IS
  'Jobs per knowledge base and status, with the age of the oldest queued job: a stall shows.';

