-- The indexing job queue: enqueue, claim (FOR UPDATE SKIP LOCKED), leases, fail and retry.
-- Running a claimed job (the build and its write) is sql/225-job-run.sql.
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
  WITH j AS (
    UPDATE kb.job j SET status = 'queued', locked_by = NULL, locked_until = NULL,
                        attempts = greatest(j.attempts - 1, 0), run_after = now()
     WHERE j.kb_id = release_job.kb_id AND j.id = release_job.job_id
       AND j.locked_by = release_job.worker AND j.status = 'running'
    RETURNING j.kb_id, j.document_id
  ), d AS (  -- its document waits again
    UPDATE kb.document d SET status = 'pending'
      FROM j WHERE d.kb_id = release_job.kb_id AND d.id = j.document_id
                AND d.status = 'indexing'
    RETURNING d.id
  )
  SELECT true FROM j
$$;
COMMENT ON FUNCTION kb.release_job(integer, bigint, text) IS
  'Hands a running job back to the queue (a worker stopping between steps of a long job, '
  'or one whose role may not do it); the attempt does not count, its document waits again '
  'as pending, and its cached LLM answers carry the next run.';

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

