-- Running a claimed job: kb.process_job builds the document with its KB's strategy (in
-- PL/Python, no locks held) and writes what it built (chunks, vectors, BM25 postings, the
-- strategy's own rows through kb._store_<strategy>) in one short transaction; the queue and
-- its leases are sql/220-jobs.sql. kb.prefetch_embeddings embeds claimed jobs' chunks ahead.
-- Every statement reads and writes one KB's rows, kb_id fixed.

CREATE OR REPLACE FUNCTION kb._build_reads_file(indexing_config jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT /*@reads_file_arms*/false/*@*/
$$;
COMMENT ON FUNCTION kb._build_reads_file(jsonb) IS
  'Internal: whether a build under this indexing_config reads the document''s stored '
  'original file (generated from the strategies'' declarations).';

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
  v_conv jsonb;
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
    v_conv := kb._convert_document(v_kb, v_doc.id);
    -- A web source's page fetched again: unchanged, or failing (the version indexed
    -- serves on), nothing to build; gone several times in a row, it goes.
    IF v_conv->>'outcome' = 'gone' THEN
      DELETE FROM kb.document d WHERE d.kb_id = v_kb AND d.id = v_doc.id;
      RETURN 'cancelled';
    ELSIF v_conv->>'outcome' IN ('unchanged', 'kept') THEN
      PERFORM kb._cancel_job(v_kb, v_job.id, 'page ' || (v_conv->>'outcome'));
      UPDATE kb.document d SET status = 'ready', updated_at = now()
       WHERE d.kb_id = v_kb AND d.id = v_doc.id AND d.status IN ('pending', 'indexing')
         AND d.chunk_count > 0;
      RETURN 'cancelled';
    END IF;
    v_err := v_conv->>'error';
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
                              CASE WHEN kb._build_reads_file(v_ix.indexing_config)
                                   THEN (SELECT f.data FROM kb.document_file f
                                          WHERE f.kb_id = v_kb AND f.document_id = v_doc.id)
                              END,
                              v_ix.id, v_kb, v_doc.id);
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
                          origin, embed_hash)
    SELECT v_ix.id, v_ix.kb_id, v_doc.id, p.ordinal, p.content, p.token_count, p.heading_path, p.page,
           p.char_start, p.char_end, v_doc.metadata, p.tsv,
           kb.tsvector_length(p.tsv, v_hw), v_origin->(p.ordinal::text), p.embed_hash
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
           chunks_reused = coalesce(v_res.reused, 0),
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
