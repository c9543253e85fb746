-- Index generations (kb.kb_index): one build of a KB's chunks, vectors, BM25 statistics
-- and strategy tables, with its own partial HNSW index.
--
-- The state machine:
--
--   building --(every document's job done)--> active --(a newer generation activates)--> dropped
--      |                                                  (in the same transaction)
--      +--(a document fails for good)--> failed   (its data is removed; the row keeps the error)
--
-- A new KB's first generation is created active. A reindex creates a building generation
-- beside the active one; jobs index every document into it while searches keep using the
-- active one; kb._maybe_activate switches the KB to it in one transaction and drops the old
-- generation. A failed reindex leaves the active generation serving.

CREATE OR REPLACE FUNCTION kb._create_index(p_kb_id integer, p_config jsonb) RETURNS kb.kb_index
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix  kb.kb_index;
BEGIN
  -- The row's trigger (kb._kb_index_hnsw) creates its HNSW index.
  INSERT INTO kb.kb_index (kb_id, indexing_config, embedding_model, embedding_dim)
  VALUES (p_kb_id, p_config, p_config->>'embedding_model', kb._config_dimensions(p_config))
  RETURNING * INTO v_ix;
  RETURN v_ix;
END
$$;
COMMENT ON FUNCTION kb._create_index(integer, jsonb) IS
  'Internal: a new index generation for a KB with its own partial HNSW index.';

-- What a generation is built with never changes, its status moves only as the state
-- machine above says, and its BM25 totals are kept by kbpg's own statistics triggers
-- (which run as the schema's owner: the worker, or a delete cascading from a document).
-- Raw SQL by a KB's writers goes through the same checks: no session setting turns them off.
CREATE OR REPLACE FUNCTION kb._kb_index_guard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.status <> 'building' OR NEW.n_chunks <> 0 OR NEW.total_len <> 0 THEN
      RAISE EXCEPTION 'a new index generation starts building with no chunks'
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'kb.reindex_knowledge_base builds a new generation';
    END IF;
    -- What it is built with is a complete, valid indexing_config, and the model and
    -- dimension it names.
    IF NEW.indexing_config IS DISTINCT FROM kb.validate_config('indexing_config', NEW.indexing_config)
       OR NEW.embedding_model IS DISTINCT FROM NEW.indexing_config->>'embedding_model'
       OR NEW.embedding_dim IS DISTINCT FROM kb._config_dimensions(NEW.indexing_config) THEN
      RAISE EXCEPTION 'a new index generation is built with a complete indexing_config and the embedding_model and embedding_dim it names'
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'kb.reindex_knowledge_base builds a new generation';
    END IF;
    RETURN NEW;
  END IF;
  IF NEW.kb_id IS DISTINCT FROM OLD.kb_id OR NEW.indexing_config IS DISTINCT FROM OLD.indexing_config
     OR NEW.embedding_model IS DISTINCT FROM OLD.embedding_model
     OR NEW.embedding_dim IS DISTINCT FROM OLD.embedding_dim THEN
    RAISE EXCEPTION 'index generation %: its knowledge base, indexing_config, embedding_model and embedding_dim cannot change', OLD.id
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'kb.reindex_knowledge_base(kb, indexing_config => ...) builds a new generation';
  END IF;
  IF NEW.status IS DISTINCT FROM OLD.status THEN
    IF NEW.status = 'active' THEN
      IF OLD.status <> 'building' OR EXISTS (
           SELECT 1 FROM kb.job j
            WHERE j.kb_id = OLD.kb_id AND j.index_id = OLD.id AND j.status IN ('queued', 'running')) THEN
        RAISE EXCEPTION 'index generation % is % with jobs left: only a finished build becomes active',
                        OLD.id, OLD.status
          USING ERRCODE = 'object_not_in_prerequisite_state';
      END IF;
    ELSIF NOT kb._sees_all(current_user) THEN
      RAISE EXCEPTION 'index generation %: only kbpg''s indexing worker moves it to %', OLD.id, NEW.status
        USING ERRCODE = 'insufficient_privilege';
    END IF;
  END IF;
  IF (NEW.n_chunks, NEW.total_len) IS DISTINCT FROM (OLD.n_chunks, OLD.total_len)
     AND NOT kb._sees_all(current_user) THEN
    RAISE EXCEPTION 'index generation %: n_chunks and total_len are BM25 statistics kept by kbpg', OLD.id
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END
$$;
COMMENT ON FUNCTION kb._kb_index_guard() IS
  'Internal (trigger on kb.kb_index): a generation''s build settings never change, its status '
  'follows the state machine, and its BM25 totals are kbpg''s to keep.';
CREATE OR REPLACE TRIGGER kb_index_guard BEFORE INSERT OR UPDATE ON kb.kb_index
  FOR EACH ROW EXECUTE FUNCTION kb._kb_index_guard();
CREATE OR REPLACE TRIGGER kb_index_hnsw AFTER INSERT OR DELETE ON kb.kb_index
  FOR EACH ROW EXECUTE FUNCTION kb._kb_index_hnsw();

CREATE OR REPLACE FUNCTION kb._clear_index(p_kb_id integer, p_index_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  -- Only the indexing worker gets here (a failed reindex): it owns the tables.
  EXECUTE format('DROP INDEX IF EXISTS kb.%I', 'embedding_hnsw_' || p_index_id);
  EXECUTE format('DROP INDEX IF EXISTS kb.%I', 'term_vector_hnsw_' || p_index_id);
  -- Every table a generation fills, generated from kbpg_db.config.FEATURES: the
  -- features' tables first (they reference chunks), then BM25, vectors and chunks. A
  -- failed generation's statistics are not kept (kb._chunk_after_delete skips them).
  /*@clear_index_tables*/DELETE FROM kb.chunk WHERE kb_id = p_kb_id AND index_id = p_index_id;/*@*/
  UPDATE kb.kb_index SET n_chunks = 0, total_len = 0 WHERE kb_id = p_kb_id AND id = p_index_id;
END
$$;
COMMENT ON FUNCTION kb._clear_index(integer, bigint) IS
  'Internal: removes a failed index generation''s HNSW indexes, chunks, vectors, BM25 data and '
  'strategy tables, keeping its kb_index row and its error.';

CREATE OR REPLACE FUNCTION kb._drop_index(p_kb_id integer, p_index_id bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  -- Everything in it goes with the row: its tables' rows by ON DELETE CASCADE (which
  -- PostgreSQL runs as the tables' owner), its HNSW index by kb._kb_index_hnsw, its BM25
  -- postings and statistics by kb._kb_index_after_delete.
  DELETE FROM kb.kb_index WHERE kb_id = p_kb_id AND id = p_index_id;
END
$$;
COMMENT ON FUNCTION kb._drop_index(integer, bigint) IS
  'Internal: removes one index generation with everything in it.';

CREATE OR REPLACE FUNCTION kb.reindex_knowledge_base(kb text, indexing_config jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base;
  v_cfg jsonb;
  v_ix  kb.kb_index;
  v_doc bigint;
BEGIN
  v_kb := kb._get_kb_for_write(kb);
  PERFORM 1 FROM kb.knowledge_base WHERE id = v_kb.id FOR UPDATE;
  IF EXISTS (SELECT 1 FROM kb.kb_index WHERE kb_id = v_kb.id AND status = 'building') THEN
    RAISE EXCEPTION 'knowledge base "%" is already being reindexed', kb
      USING ERRCODE = 'object_in_use', HINT = 'wait for it; kbpg status shows the queue';
  END IF;
  v_cfg := CASE WHEN indexing_config IS NULL
                THEN kb.validate_config('indexing_config', v_kb.indexing_config)
                ELSE kb._complete_config('indexing_config', indexing_config) END;
  -- The KB's retrieval_config must suit the new strategy (tree_search vs hybrid, ...).
  IF v_cfg->>'strategy' IS DISTINCT FROM v_kb.indexing_config->>'strategy' THEN
    PERFORM kb.validate_config('retrieval_config',
                               v_kb.retrieval_config - 'method', v_cfg->>'strategy');
  END IF;
  PERFORM kb._check_text_search_config(v_cfg->>'text_search_config');
  v_ix := kb._create_index(v_kb.id, v_cfg);
  FOR v_doc IN SELECT id FROM kb.document WHERE kb_id = v_kb.id ORDER BY id LOOP
    PERFORM kb._enqueue(v_kb.id, v_doc, v_ix.id);
  END LOOP;
  PERFORM kb._maybe_activate(v_kb.id, v_ix.id);
  RETURN v_ix.id;
END
$$;
COMMENT ON FUNCTION kb.reindex_knowledge_base(text, jsonb) IS
  'Rebuilds every document into a new index generation (same or new indexing_config, model '
  'and dimension). Searches use the old generation until every document is done, then switch '
  'in one transaction. Returns the new generation''s id.';

CREATE OR REPLACE FUNCTION kb._maybe_activate(p_kb_id integer, p_index_id bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix  kb.kb_index;
  v_old bigint;
BEGIN
  SELECT * INTO v_ix FROM kb.kb_index WHERE kb_id = p_kb_id AND id = p_index_id;
  IF v_ix.status <> 'building' OR EXISTS (
       SELECT 1 FROM kb.job
        WHERE kb_id = p_kb_id AND index_id = p_index_id AND status IN ('queued', 'running')) THEN
    RETURN false;
  END IF;
  SELECT active_index_id INTO v_old FROM kb.knowledge_base WHERE id = p_kb_id FOR UPDATE;
  UPDATE kb.kb_index SET status = 'active', activated_at = now()
   WHERE kb_id = p_kb_id AND id = p_index_id;
  -- The KB's build settings are its serving generation's (kb._knowledge_base_check).
  UPDATE kb.knowledge_base k
     SET active_index_id = p_index_id, indexing_config = v_ix.indexing_config,
         embedding_model = v_ix.embedding_model, embedding_dim = v_ix.embedding_dim,
         retrieval_config = CASE
           WHEN k.indexing_config->>'strategy' IS DISTINCT FROM v_ix.indexing_config->>'strategy'
           THEN kb.validate_config('retrieval_config', k.retrieval_config - 'method',
                                   v_ix.indexing_config->>'strategy')
           ELSE k.retrieval_config END
   WHERE id = p_kb_id;
  UPDATE kb.document d
     SET chunk_count = (SELECT count(*) FROM kb.chunk c
                         WHERE c.kb_id = p_kb_id AND c.document_id = d.id
                           AND c.index_id = p_index_id),
         status = 'ready', error = NULL
   WHERE d.kb_id = p_kb_id;
  -- What building this generation cost, per document (its last finished job).
  UPDATE kb.document d
     SET llm_calls = j.llm_calls, llm_cache_hits = j.llm_cache_hits,
         llm_prompt_tokens = j.llm_prompt_tokens, llm_completion_tokens = j.llm_completion_tokens,
         llm_cost_usd = j.llm_cost_usd, indexed_at = j.finished_at
    FROM (SELECT DISTINCT ON (document_id) * FROM kb.job
           WHERE kb_id = p_kb_id AND index_id = p_index_id AND status = 'done'
           ORDER BY document_id, id DESC) j
   WHERE d.kb_id = p_kb_id AND d.id = j.document_id;
  IF v_old IS NOT NULL THEN
    PERFORM kb._drop_index(p_kb_id, v_old);
  END IF;
  RETURN true;
END
$$;
COMMENT ON FUNCTION kb._maybe_activate(integer, bigint) IS
  'Internal: switches a KB to a finished index generation and drops the previous one.';


CREATE OR REPLACE FUNCTION kb.index_generations(kb_name text, latest integer DEFAULT NULL)
RETURNS TABLE (index_id bigint, status text, serving boolean, strategy text,
               indexing_config jsonb, embedding_model text, chunks bigint, jobs_done bigint,
               jobs_waiting bigint, jobs_failed bigint, error text, created_at timestamptz,
               activated_at timestamptz)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  -- The newest generations first, then their jobs counted (jobs stay after they finish:
  -- a KB's older generations are not counted when only the latest are asked for).
  SELECT ix.id, ix.status, ix.id = k.active_index_id, ix.indexing_config->>'strategy',
         ix.indexing_config, ix.embedding_model, ix.n_chunks, j.done, j.waiting, j.failed,
         ix.error, ix.created_at, ix.activated_at
  FROM kb._get_kb(kb_name) k
  CROSS JOIN LATERAL (SELECT * FROM kb.kb_index i WHERE i.kb_id = k.id
                      ORDER BY i.id DESC LIMIT latest) ix
  CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE jb.status = 'done') AS done,
           count(*) FILTER (WHERE jb.status IN ('queued', 'running')) AS waiting,
           count(*) FILTER (WHERE jb.status = 'failed') AS failed
    FROM kb.job jb WHERE jb.kb_id = ix.kb_id AND jb.index_id = ix.id) j
  ORDER BY ix.id DESC
$$;
COMMENT ON FUNCTION kb.index_generations(text, integer) IS
  'A knowledge base''s index generations, newest first (the latest ones only, when given): '
  'which one serves, each one''s strategy and settings, its chunks, its jobs done, waiting '
  'and failed, and a failed '
  'one''s error (the Retrieval Lab''s progress bar reads it).';
