-- Documents: add, replace, delete, reindex one; their status and what indexing cost.

CREATE OR REPLACE FUNCTION kb._media_type_of(file_name text) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT CASE lower(substring(file_name FROM '\.([A-Za-z0-9]+)$'))
    /*@media_type_arms*/WHEN 'pdf' THEN 'application/pdf'/*@*/
  END
$$;
COMMENT ON FUNCTION kb._media_type_of(text) IS
  'Internal: the media type a stored original is served with, by its file name (from '
  'kbpg_db.convert.FILE_TYPES, the list of the formats kbpg converts).';

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
              ELSE coalesce(kb._media_type_of(coalesce(p_file_name, p_title)),
                            'application/octet-stream') END,
         p_file, p_sha256, octet_length(p_file)
  WHERE p_file IS NOT NULL
  ON CONFLICT (document_id, kb_id) DO UPDATE
    SET file_name = EXCLUDED.file_name, media_type = EXCLUDED.media_type, data = EXCLUDED.data,
        sha256 = EXCLUDED.sha256, byte_size = EXCLUDED.byte_size, stored_at = now()
$$;
COMMENT ON FUNCTION kb._keep_file(integer, bigint, bytea, text, text, text) IS
  'Internal: stores (or replaces) a document''s original file, given its sha256 (hex); '
  'nothing when p_file is NULL.';

CREATE OR REPLACE FUNCTION kb._check_document_args(p_title text, p_metadata jsonb,
                                                  p_usage_mode text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF kb._blank(p_title) THEN
    RAISE EXCEPTION 'document title must not be empty' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF length(p_title) > 1000 THEN
    RAISE EXCEPTION 'document title is % characters; the limit is 1000', length(p_title)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_metadata IS NULL OR jsonb_typeof(p_metadata) <> 'object' THEN
    RAISE EXCEPTION 'metadata of document "%" must be a JSON object', p_title
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_usage_mode IS NULL OR p_usage_mode NOT IN (/*@usage_modes*/'rag', 'system', 'policy'/*@*/) THEN
    RAISE EXCEPTION 'usage_mode must be rag, system or policy, not %', coalesce(quote_literal(p_usage_mode), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
END
$$;
COMMENT ON FUNCTION kb._check_document_args(text, jsonb, text) IS
  'Internal: the checks every way of adding a document makes on its title, metadata and '
  'usage_mode.';

CREATE OR REPLACE FUNCTION kb._max_document_bytes() RETURNS bigint
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce(nullif(current_setting('kb.max_document_bytes', true), '')::bigint,
                  /*@max_document_bytes*/52428800/*@*/)
$$;

CREATE OR REPLACE FUNCTION kb._check_file(p_title text, p_file bytea) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_limit bigint := kb._max_document_bytes();
BEGIN
  IF p_file IS NOT NULL AND octet_length(p_file) > v_limit THEN
    RAISE EXCEPTION 'the file of document "%" is % bytes; the limit is % bytes', p_title, octet_length(p_file), v_limit
      USING ERRCODE = 'program_limit_exceeded', HINT = 'raise kb.max_document_bytes';
  END IF;
  IF p_file IS NOT NULL AND octet_length(p_file) = 0 THEN
    RAISE EXCEPTION 'the file of document "%" is empty', p_title USING ERRCODE = 'invalid_parameter_value';
  END IF;
END
$$;

CREATE OR REPLACE FUNCTION kb._check_regions(p_title text, p_regions jsonb, p_length integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF p_regions IS NULL THEN
    RETURN;
  END IF;
  -- The row's shape first, its numbers after (CASE fixes the order: a string is never
  -- cast, so a bad row gets this error, not a cast's).
  IF jsonb_typeof(p_regions) <> 'array' OR EXISTS (
       SELECT 1 FROM jsonb_array_elements(p_regions) r
        WHERE CASE WHEN jsonb_typeof(r) <> 'array' OR jsonb_array_length(r) NOT IN (7, 8)
                        OR EXISTS (SELECT 1 FROM jsonb_array_elements(r) WITH ORDINALITY v(x, i)
                                    WHERE i <= 7 AND jsonb_typeof(x) <> 'number'
                                       OR i = 8 AND jsonb_typeof(x) NOT IN ('number', 'null'))
                   THEN true
                   ELSE (r->>0)::numeric < 0 OR (r->>1)::numeric < (r->>0)::numeric
                        OR (r->>1)::numeric > p_length OR (r->>2)::numeric < 1 END) THEN
    RAISE EXCEPTION 'regions of document "%" must be an array of [char_start, char_end, page, x0, y0, x1, y1] within its text', p_title
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'offsets count characters of the text, pages from 1; boxes are in PDF points';
  END IF;
END
$$;
COMMENT ON FUNCTION kb._check_regions(text, jsonb, integer) IS
  'Internal: a document''s regions are rows [char_start, char_end, page, x0, y0, x1, y1] '
  '(and a confidence) within its text.';

CREATE OR REPLACE FUNCTION kb._upsert_document(
    p_kb kb.knowledge_base, p_title text, p_content text, p_hash text, p_metadata jsonb,
    p_source_uri text, p_usage_mode text, p_page_starts integer[], p_file bytea,
    p_file_name text, p_source_format text, p_source_meta jsonb, p_keep boolean,
    p_media jsonb)
RETURNS TABLE (document_id bigint, action text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_fhash text := encode(sha256(p_file), 'hex');
  v_old   kb.document;
  v_id    bigint;
BEGIN
  SELECT * INTO v_old FROM kb.document d WHERE d.kb_id = p_kb.id AND d.title = p_title
    FOR UPDATE;
  IF FOUND THEN
    IF v_old.content_hash = p_hash AND v_old.status <> 'error'
       AND v_old.metadata = p_metadata AND v_old.usage_mode = p_usage_mode
       AND v_old.page_starts IS NOT DISTINCT FROM p_page_starts
       AND v_old.source_format IS NOT DISTINCT FROM p_source_format
       -- Text given with its regions: new regions (a reader that records them) re-index.
       AND (p_source_format IS NOT NULL OR v_old.source_meta IS NOT DISTINCT FROM p_source_meta)
       AND (p_file IS NULL OR EXISTS (SELECT 1 FROM kb.document_file f
                                       WHERE f.kb_id = p_kb.id AND f.document_id = v_old.id
                                         AND f.sha256 = v_fhash)) THEN
      RETURN QUERY SELECT v_old.id, 'unchanged'::text;
      RETURN;
    END IF;
    -- The old chunks keep serving until the new version is indexed.
    UPDATE kb.document d
       SET content = p_content, content_hash = p_hash, metadata = p_metadata,
           source_uri = coalesce(p_source_uri, d.source_uri),
           usage_mode = p_usage_mode, page_starts = p_page_starts,
           source_format = p_source_format, source_meta = p_source_meta,
           status = 'pending', error = NULL, attempts = 0, updated_at = now()
     WHERE d.kb_id = p_kb.id AND d.id = v_old.id;
    v_id := v_old.id;
    action := 'replaced';
  ELSE
    INSERT INTO kb.document AS d (kb_id, title, source_uri, content, content_hash, metadata,
                                  usage_mode, page_starts, source_format, source_meta)
    VALUES (p_kb.id, p_title, p_source_uri, p_content, p_hash, p_metadata, p_usage_mode,
            p_page_starts, p_source_format, p_source_meta)
    RETURNING d.id INTO v_id;
    action := 'added';
  END IF;
  PERFORM kb._keep_file(p_kb.id, v_id, p_file, v_fhash, p_file_name, p_title);
  IF p_file IS NOT NULL THEN
    UPDATE kb.document_file f SET keep = coalesce(p_keep, true)
     WHERE f.kb_id = p_kb.id AND f.document_id = v_id;
  ELSIF p_source_format = 'url' THEN
    DELETE FROM kb.document_file f WHERE f.kb_id = p_kb.id AND f.document_id = v_id;  -- fetched anew
  END IF;
  IF p_source_format IS NULL THEN  -- text given directly: its media are known now
    PERFORM kb._store_media(p_kb.id, v_id, p_media);
  END IF;
  PERFORM kb._enqueue_document(p_kb, v_id);
  document_id := v_id;
  RETURN NEXT;
END
$$;
COMMENT ON FUNCTION kb._upsert_document(kb.knowledge_base, text, text, text, jsonb, text, text,
    integer[], bytea, text, text, jsonb, boolean, jsonb) IS
  'Internal: adds a document or replaces the one with its title (unchanged when nothing '
  'differs) and queues its indexing; put_document, add_file and add_url call it.';

CREATE OR REPLACE FUNCTION kb.put_document(
    kb text,
    title text,
    content text,
    metadata jsonb DEFAULT '{}',
    source_uri text DEFAULT NULL,
    usage_mode text DEFAULT 'rag',
    page_starts integer[] DEFAULT NULL,
    file bytea DEFAULT NULL,
    file_name text DEFAULT NULL,
    regions jsonb DEFAULT NULL
) RETURNS TABLE (document_id bigint, action text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb    kb.knowledge_base;
  v_limit bigint := kb._max_document_bytes();
  v_text  text := content;
  v_media jsonb := '[]';
BEGIN
  v_kb := kb._get_kb_for_write(kb);
  PERFORM kb._check_document_args(title, metadata, usage_mode);
  IF kb._blank(content) THEN
    RAISE EXCEPTION 'document "%" has no text', title USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF octet_length(content) > v_limit THEN
    RAISE EXCEPTION 'document "%" is % bytes; the limit is % bytes', title, octet_length(content), v_limit
      USING ERRCODE = 'program_limit_exceeded', HINT = 'split the document or raise kb.max_document_bytes';
  END IF;
  IF page_starts IS NOT NULL AND (page_starts[1] IS DISTINCT FROM 0 OR EXISTS (
       SELECT 1 FROM unnest(page_starts) WITH ORDINALITY a(v, i)
        WHERE v IS NULL OR v > length(content) OR v < coalesce(page_starts[i - 1], 0))) THEN
    RAISE EXCEPTION 'page_starts of document "%" must start at 0 and ascend within the text', title
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM kb._check_file(title, file);
  PERFORM kb._check_regions(title, regions, length(content));
  -- Inline base64 media (data: URIs) leave the text for kb.document_media; page_starts
  -- point into the text as given, so a paged text keeps its media inline.
  IF page_starts IS NULL AND strpos(content, ';base64,') > 0 THEN
    SELECT m.content, m.media INTO v_text, v_media FROM kb._extract_media(content) m;
  END IF;
  RETURN QUERY SELECT * FROM kb._upsert_document(v_kb, title, v_text, md5(content), metadata,
    source_uri, usage_mode, page_starts, file, file_name, NULL,
    -- Regions point into the text as given: kept only where it stays as given.
    CASE WHEN regions IS NOT NULL AND v_text = content
         THEN jsonb_build_object('regions', regions) END,
    NULL, v_media);
END
$$;
COMMENT ON FUNCTION kb.put_document(text, text, text, jsonb, text, text, integer[], bytea, text,
    jsonb) IS
  'Adds a document, or replaces the one with the same title, and queues its indexing in the '
  'same transaction. action is added, replaced or unchanged (same text: nothing to do). file '
  'keeps the original file (a PDF) beside the text, for strategies that read it; NULL keeps '
  'the file stored before. Base64 data: URIs in the text are stored in kb.document_media '
  'and replaced by kbpg-media: references. regions: where stretches of the text sit on its '
  'pages, [[char_start, char_end, page, x0, y0, x1, y1], ...] in PDF points (what kbpg '
  'ingest''s PDF reader records); each chunk gets the boxes its text overlaps.';

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
  UPDATE kb.document d SET status = 'pending', error = NULL, attempts = 0, updated_at = now()
   WHERE d.kb_id = v_kb.id AND d.id = v_id;
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
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
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
          ON ix.id = k.active_index_id AND ix.kb_id = k.id
        WHERE k.id = NEW.kb_id AND ix.kb_id = NEW.kb_id), NEW.chunking);
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
  'Gives one document its own chunking settings over its KB''s indexing_config (chunker, chunk_size, chunk_overlap, chunk_unit, separators, '
  'sentences_per_chunk, semantic_percentile, title_line, code_chunking; never the model), '
  'checked over the KB''s config, kept across reindexes, and re-indexes the document; NULL '
  'or ''{}'' clears them. Returns the document id.';

CREATE OR REPLACE VIEW kb.document_status WITH (security_invoker = true) AS
  SELECT k.name AS kb, d.id AS document_id, d.title, d.status, d.usage_mode, d.chunk_count,
         d.attempts, d.error, d.tokens_embedded, d.embedding_cost_usd, d.source_uri,
         d.created_at, d.updated_at, d.indexed_at,
         (SELECT j.progress FROM kb.job j
           WHERE j.kb_id = d.kb_id AND j.document_id = d.id AND j.status IN ('queued', 'running')
           ORDER BY j.id DESC LIMIT 1) AS progress,
         d.llm_calls, d.llm_cache_hits, d.llm_prompt_tokens, d.llm_completion_tokens,
         d.llm_cost_usd, d.chunking, d.source_format,
         (SELECT count(*) FROM kb.document_media m
           WHERE m.kb_id = d.kb_id AND m.document_id = d.id) AS media,
         d.kb_id, d.chunks_reused,
         (SELECT s.name FROM kb.source s WHERE s.kb_id = d.kb_id AND s.id = d.source_id) AS source,
         d.source_key,
         (SELECT j.run_after FROM kb.job j
           WHERE j.kb_id = d.kb_id AND j.document_id = d.id AND j.status = 'queued'
           ORDER BY j.id DESC LIMIT 1) AS next_attempt
  FROM kb.document d JOIN kb.knowledge_base k ON k.id = d.kb_id;
COMMENT ON VIEW kb.document_status IS
  'Every document with its indexing status, per KB: progress of a running job ("summarising '
  'nodes 12/40"), tokens embedded and chunks whose vectors a rebuild kept, the LLM calls its '
  'index cost (calls paid; cache hits were free), its source and key there, and when a job '
  'waiting to retry runs next.';
GRANT SELECT ON kb.document_status TO PUBLIC;  -- rows as the caller's policies allow

CREATE OR REPLACE FUNCTION kb.list_documents(kb text, title text DEFAULT NULL)
RETURNS SETOF kb.document_status
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base := kb._get_kb(list_documents.kb);
BEGIN
  -- Planned for this KB's own id (EXECUTE): a small KB beside a large one is an index
  -- scan of its documents. Filtering the view by KB name is planned for an average KB,
  -- and beside a million-document KB that was a scan of every document (0.8 s for 29).
  RETURN QUERY EXECUTE
    'SELECT * FROM kb.document_status s WHERE s.kb_id = $1 AND ($2::text IS NULL OR s.title = $2) '
    'ORDER BY s.document_id'
    USING v_kb.id, list_documents.title;
END
$$;
COMMENT ON FUNCTION kb.list_documents(text, text) IS
  'The documents of a knowledge base (or the one with title) as kb.document_status rows, '
  'in id order; costs what this KB holds, whatever other KBs hold.';

CREATE OR REPLACE VIEW kb.knowledge_base_usage WITH (security_invoker = true) AS
  SELECT k.name AS kb, count(d.id) AS documents, coalesce(sum(d.chunk_count), 0) AS chunks,
         coalesce(sum(d.tokens_embedded), 0) AS tokens_embedded,
         sum(d.embedding_cost_usd) AS embedding_cost_usd,
         coalesce(sum(d.llm_calls), 0) AS llm_calls,
         coalesce(sum(d.llm_cache_hits), 0) AS llm_cache_hits,
         coalesce(sum(d.llm_prompt_tokens), 0) AS llm_prompt_tokens,
         coalesce(sum(d.llm_completion_tokens), 0) AS llm_completion_tokens,
         sum(d.llm_cost_usd) AS llm_cost_usd, k.id AS kb_id,
         coalesce(sum(d.chunks_reused), 0) AS chunks_reused
  FROM kb.knowledge_base k LEFT JOIN kb.document d ON d.kb_id = k.id
  GROUP BY k.id, k.name;
COMMENT ON VIEW kb.knowledge_base_usage IS
  'Tokens embedded, LLM calls and tokens, and provider cost per KB; chunks_reused: chunks '
  'whose vectors the last rebuild of their document kept (their text had not changed).';
GRANT SELECT ON kb.knowledge_base_usage TO PUBLIC;  -- rows as the caller's policies allow

-- Chunks carry their document's metadata (filters read it there, next to the vectors);
-- a direct UPDATE of kb.document.metadata by a DBA reaches them too. Chunks are written
-- by kbpg only (no role but the owner may write kb.chunk): SECURITY DEFINER, for the
-- document rows the updating role may change (kb.document's policies).
CREATE OR REPLACE FUNCTION kb._document_metadata_sync() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  UPDATE kb.chunk SET metadata = NEW.metadata WHERE kb_id = NEW.kb_id AND document_id = NEW.id;
  RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER document_metadata_sync AFTER UPDATE OF metadata ON kb.document
  FOR EACH ROW WHEN (OLD.metadata IS DISTINCT FROM NEW.metadata)
  EXECUTE FUNCTION kb._document_metadata_sync();
