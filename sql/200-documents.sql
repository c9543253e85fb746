-- Documents: add, replace, delete, reindex one; their status and what indexing cost.

CREATE OR REPLACE FUNCTION kb._keep_file(p_kb_id integer, p_document_id bigint, p_file bytea,
                                         p_sha256 text, p_file_name text, p_title text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  INSERT INTO kb.document_file AS f (document_id, kb_id, file_name, media_type, data, sha256,
                                     byte_size)
  SELECT p_document_id, p_kb_id, coalesce(p_file_name, p_title),
         CASE WHEN substr(p_file, 1, 5) = '\x255044462d'::bytea THEN 'application/pdf'
              ELSE 'application/octet-stream' END,
         p_file, p_sha256, octet_length(p_file)
  WHERE p_file IS NOT NULL
  ON CONFLICT (document_id) DO UPDATE
    SET file_name = EXCLUDED.file_name, media_type = EXCLUDED.media_type, data = EXCLUDED.data,
        sha256 = EXCLUDED.sha256, byte_size = EXCLUDED.byte_size, stored_at = now()
$$;
COMMENT ON FUNCTION kb._keep_file(integer, bigint, bytea, text, text, text) IS
  'Internal: stores (or replaces) a document''s original file, given its sha256 (hex); '
  'nothing when p_file is NULL.';

CREATE OR REPLACE FUNCTION kb.put_document(
    kb text,
    title text,
    content text,
    metadata jsonb DEFAULT '{}',
    source_uri text DEFAULT NULL,
    usage_mode text DEFAULT 'rag',
    page_starts integer[] DEFAULT NULL,
    file bytea DEFAULT NULL,
    file_name text DEFAULT NULL
) RETURNS TABLE (document_id bigint, action text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb    kb.knowledge_base;
  v_hash  text;
  v_fhash text;
  v_old   kb.document;
  v_limit bigint := coalesce(nullif(current_setting('kb.max_document_bytes', true), '')::bigint,
                             /*@max_document_bytes*/52428800/*@*/);
BEGIN
  v_kb := kb._get_kb_for_write(kb);
  IF title IS NULL OR btrim(title) = '' THEN
    RAISE EXCEPTION 'document title must not be empty' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF length(title) > 1000 THEN
    RAISE EXCEPTION 'document title is % characters; the limit is 1000', length(title)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF content IS NULL OR btrim(content, E' \t\r\n\f\v') = '' THEN
    RAISE EXCEPTION 'document "%" has no text', title USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF octet_length(content) > v_limit THEN
    RAISE EXCEPTION 'document "%" is % bytes; the limit is % bytes', title, octet_length(content), v_limit
      USING ERRCODE = 'program_limit_exceeded', HINT = 'split the document or raise kb.max_document_bytes';
  END IF;
  IF metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
    RAISE EXCEPTION 'metadata of document "%" must be a JSON object', title
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF usage_mode IS NULL OR usage_mode NOT IN (/*@usage_modes*/'rag', 'system', 'policy'/*@*/) THEN
    RAISE EXCEPTION 'usage_mode must be rag, system or policy, not %', coalesce(quote_literal(usage_mode), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF page_starts IS NOT NULL AND (page_starts[1] IS DISTINCT FROM 0 OR EXISTS (
       SELECT 1 FROM unnest(page_starts) WITH ORDINALITY a(v, i)
        WHERE v IS NULL OR v > length(content) OR v < coalesce(page_starts[i - 1], 0))) THEN
    RAISE EXCEPTION 'page_starts of document "%" must start at 0 and ascend within the text', title
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF file IS NOT NULL AND octet_length(file) > v_limit THEN
    RAISE EXCEPTION 'the file of document "%" is % bytes; the limit is % bytes', title, octet_length(file), v_limit
      USING ERRCODE = 'program_limit_exceeded', HINT = 'raise kb.max_document_bytes';
  END IF;
  IF file IS NOT NULL AND octet_length(file) = 0 THEN
    RAISE EXCEPTION 'the file of document "%" is empty', title USING ERRCODE = 'invalid_parameter_value';
  END IF;
  v_hash := md5(content);
  v_fhash := encode(sha256(file), 'hex');
  SELECT * INTO v_old FROM kb.document d WHERE d.kb_id = v_kb.id AND d.title = put_document.title
    FOR UPDATE;
  IF FOUND THEN
    IF v_old.content_hash = v_hash AND v_old.status <> 'error'
       AND v_old.metadata = put_document.metadata AND v_old.usage_mode = put_document.usage_mode
       AND v_old.page_starts IS NOT DISTINCT FROM put_document.page_starts
       AND (file IS NULL OR EXISTS (SELECT 1 FROM kb.document_file f
                                     WHERE f.document_id = v_old.id AND f.sha256 = v_fhash)) THEN
      RETURN QUERY SELECT v_old.id, 'unchanged'::text;
      RETURN;
    END IF;
    -- The old chunks keep serving until the new version is indexed.
    UPDATE kb.document d
       SET content = put_document.content, content_hash = v_hash, metadata = put_document.metadata,
           source_uri = coalesce(put_document.source_uri, d.source_uri),
           usage_mode = put_document.usage_mode, page_starts = put_document.page_starts,
           status = 'pending', error = NULL, attempts = 0, updated_at = now()
     WHERE d.id = v_old.id;
    PERFORM kb._keep_file(v_kb.id, v_old.id, file, v_fhash, file_name, title);
    PERFORM kb._enqueue_document(v_kb, v_old.id);
    RETURN QUERY SELECT v_old.id, 'replaced'::text;
    RETURN;
  END IF;
  INSERT INTO kb.document AS d (kb_id, title, source_uri, content, content_hash, metadata,
                                usage_mode, page_starts)
  VALUES (v_kb.id, title, source_uri, content, v_hash, metadata, usage_mode, page_starts)
  RETURNING d.id INTO document_id;
  PERFORM kb._keep_file(v_kb.id, document_id, file, v_fhash, file_name, title);
  PERFORM kb._enqueue_document(v_kb, document_id);
  action := 'added';
  RETURN NEXT;
END
$$;
COMMENT ON FUNCTION kb.put_document(text, text, text, jsonb, text, text, integer[], bytea, text) IS
  'Adds a document, or replaces the one with the same title, and queues its indexing in the '
  'same transaction. action is added, replaced or unchanged (same text: nothing to do). file '
  'keeps the original file (a PDF) beside the text, for strategies that read it; NULL keeps '
  'the file stored before.';

CREATE OR REPLACE FUNCTION kb.add_document(
    kb text,
    title text,
    content text,
    metadata jsonb DEFAULT '{}',
    source_uri text DEFAULT NULL,
    usage_mode text DEFAULT 'rag',
    page_starts integer[] DEFAULT NULL,
    file bytea DEFAULT NULL,
    file_name text DEFAULT NULL
) RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT p.document_id
  FROM kb.put_document(kb, title, content, metadata, source_uri, usage_mode, page_starts,
                       file, file_name) p
$$;
COMMENT ON FUNCTION kb.add_document(text, text, text, jsonb, text, text, integer[], bytea, text) IS
  'Adds (or replaces, by title) a document and queues its indexing; returns the document id.';

CREATE OR REPLACE FUNCTION kb.delete_document(kb text, title text) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_id bigint;
BEGIN
  SELECT d.id INTO v_id FROM kb.document d
   WHERE d.kb_id = (kb._get_kb_for_write(kb)).id AND d.title = delete_document.title;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'document "%" does not exist in knowledge base "%"', title, kb
      USING ERRCODE = 'no_data_found';
  END IF;
  RETURN kb.delete_document(kb, v_id);
END
$$;
COMMENT ON FUNCTION kb.delete_document(text, text) IS
  'Deletes a document by title with its chunks and vectors; BM25 statistics follow.';

CREATE OR REPLACE FUNCTION kb.delete_document(kb text, document_id bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base;
BEGIN
  v_kb := kb._get_kb_for_write(kb);
  DELETE FROM kb.document d WHERE d.kb_id = v_kb.id AND d.id = delete_document.document_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'document % does not exist in knowledge base "%"', document_id, kb
      USING ERRCODE = 'no_data_found';
  END IF;
  RETURN true;
END
$$;
COMMENT ON FUNCTION kb.delete_document(text, bigint) IS
  'Deletes a document by id with its chunks and vectors; BM25 statistics follow.';

CREATE OR REPLACE FUNCTION kb.reindex_document(kb text, title text) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base;
  v_id bigint;
BEGIN
  v_kb := kb._get_kb_for_write(kb);
  SELECT d.id INTO v_id FROM kb.document d WHERE d.kb_id = v_kb.id AND d.title = reindex_document.title
    FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'document "%" does not exist in knowledge base "%"', title, kb
      USING ERRCODE = 'no_data_found';
  END IF;
  UPDATE kb.document SET status = 'pending', error = NULL, attempts = 0, updated_at = now()
   WHERE id = v_id;
  PERFORM kb._enqueue_document(v_kb, v_id);
  RETURN v_id;
END
$$;
COMMENT ON FUNCTION kb.reindex_document(text, text) IS
  'Queues a document for indexing again; its current chunks serve until the new ones are ready.';

CREATE OR REPLACE FUNCTION kb._py_document_chunking(indexing_config jsonb, chunking jsonb)
RETURNS jsonb
LANGUAGE plpython3u STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if not GD.get("kbpg_ready"): plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.document_chunking(plpy, indexing_config, chunking)
$$;

CREATE OR REPLACE FUNCTION kb._document_chunking_check() RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  -- However it is written (kb.set_document_chunking or UPDATE), checked over the KB's
  -- serving config and stored completed; '{}' means none.
  IF NEW.chunking IS NOT NULL AND NEW.chunking <> '{}' THEN
    NEW.chunking := kb._py_document_chunking(
      (SELECT ix.indexing_config FROM kb.knowledge_base k JOIN kb.kb_index ix
          ON ix.id = k.active_index_id WHERE k.id = NEW.kb_id), NEW.chunking);
  ELSE
    NEW.chunking := NULL;
  END IF;
  RETURN NEW;
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._document_chunking_check() IS
  'Internal: a document''s chunking settings are checked whenever they are written.';
CREATE OR REPLACE TRIGGER document_chunking_check BEFORE INSERT OR UPDATE OF chunking
  ON kb.document FOR EACH ROW EXECUTE FUNCTION kb._document_chunking_check();

CREATE OR REPLACE FUNCTION kb.set_document_chunking(kb text, title text, chunking jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base := kb._get_kb_for_write(set_document_chunking.kb);
BEGIN
  -- The trigger checks the settings; reindex_document names a missing document.
  UPDATE kb.document d SET chunking = set_document_chunking.chunking
   WHERE d.kb_id = v_kb.id AND d.title = set_document_chunking.title;
  RETURN kb.reindex_document(set_document_chunking.kb, set_document_chunking.title);
END
$$;
COMMENT ON FUNCTION kb.set_document_chunking(text, text, jsonb) IS
  'Gives one document its own chunking settings over its KB''s indexing_config (seed 003''s '
  'ChunkingOverride: chunker, chunk_size, chunk_overlap, chunk_unit, separators, '
  'sentences_per_chunk, semantic_percentile, title_line, code_chunking; never the model), '
  'checked over the KB''s config, kept across reindexes, and re-indexes the document; NULL '
  'or ''{}'' clears them. Returns the document id.';

CREATE OR REPLACE VIEW kb.document_status WITH (security_invoker = true) AS
  SELECT k.name AS kb, d.id AS document_id, d.title, d.status, d.usage_mode, d.chunk_count,
         d.attempts, d.error, d.tokens_embedded, d.embedding_cost_usd, d.source_uri,
         d.created_at, d.updated_at, d.indexed_at,
         (SELECT j.progress FROM kb.job j
           WHERE j.document_id = d.id AND j.status IN ('queued', 'running')
           ORDER BY j.id DESC LIMIT 1) AS progress,
         d.llm_calls, d.llm_cache_hits, d.llm_prompt_tokens, d.llm_completion_tokens,
         d.llm_cost_usd, d.chunking
  FROM kb.document d JOIN kb.knowledge_base k ON k.id = d.kb_id;
COMMENT ON VIEW kb.document_status IS
  'Every document with its indexing status, per KB: progress of a running job ("summarising '
  'nodes 12/40"), tokens embedded, and the LLM calls its index cost (calls paid; cache hits '
  'were free).';
GRANT SELECT ON kb.document_status TO PUBLIC;  -- rows as the caller's policies allow

CREATE OR REPLACE VIEW kb.knowledge_base_usage WITH (security_invoker = true) AS
  SELECT k.name AS kb, count(d.id) AS documents, coalesce(sum(d.chunk_count), 0) AS chunks,
         coalesce(sum(d.tokens_embedded), 0) AS tokens_embedded,
         sum(d.embedding_cost_usd) AS embedding_cost_usd,
         coalesce(sum(d.llm_calls), 0) AS llm_calls,
         coalesce(sum(d.llm_cache_hits), 0) AS llm_cache_hits,
         coalesce(sum(d.llm_prompt_tokens), 0) AS llm_prompt_tokens,
         coalesce(sum(d.llm_completion_tokens), 0) AS llm_completion_tokens,
         sum(d.llm_cost_usd) AS llm_cost_usd
  FROM kb.knowledge_base k LEFT JOIN kb.document d ON d.kb_id = k.id
  GROUP BY k.name;
COMMENT ON VIEW kb.knowledge_base_usage IS
  'Tokens embedded, LLM calls and tokens, and provider cost per KB.';
GRANT SELECT ON kb.knowledge_base_usage TO PUBLIC;  -- rows as the caller's policies allow

-- Chunks carry their document's metadata (filters read it there, next to the vectors);
-- a direct UPDATE of kb.document.metadata by a DBA reaches them too.
CREATE OR REPLACE FUNCTION kb._document_metadata_sync() RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  UPDATE kb.chunk SET metadata = NEW.metadata WHERE document_id = NEW.id;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER document_metadata_sync AFTER UPDATE OF metadata ON kb.document
  FOR EACH ROW WHEN (OLD.metadata IS DISTINCT FROM NEW.metadata)
  EXECUTE FUNCTION kb._document_metadata_sync();
