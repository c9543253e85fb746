-- Files and web pages in through SQL: kb.add_file and kb.add_url store the original and
-- queue the document; its indexing job converts it (kbpg_db.convert, in a limited child
-- process) before chunking, so a file that cannot be converted gets an error on its
-- document row like any other failure. Embedded media: kb.document_media and kb.media.

CREATE OR REPLACE FUNCTION kb._py_extract_media(body text, OUT content text, OUT media jsonb)
LANGUAGE plpython3u IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.extract_media(body)
$$;
CREATE OR REPLACE FUNCTION kb._extract_media(body text, OUT content text, OUT media jsonb)
LANGUAGE plpgsql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  SELECT m.content, m.media INTO _extract_media.content, _extract_media.media
    FROM kb._py_extract_media(body) m;
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._extract_media(text) IS
  'Internal: the text with each base64 data: URI replaced by kbpg-media:<ref>, and the media '
  '(ref, media_type, sha256, base64 data) as a JSON array.';

CREATE OR REPLACE FUNCTION kb._store_media(p_kb_id integer, p_document_id bigint, p_media jsonb)
RETURNS integer
LANGUAGE sql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  DELETE FROM kb.document_media m WHERE m.kb_id = p_kb_id AND m.document_id = p_document_id;
  INSERT INTO kb.document_media (kb_id, document_id, ref, media_type, data, sha256, byte_size)
  SELECT p_kb_id, p_document_id, e->>'ref', e->>'media_type', decode(e->>'data', 'base64'),
         e->>'sha256', octet_length(decode(e->>'data', 'base64'))
  FROM jsonb_array_elements(coalesce(p_media, '[]')) e
  ON CONFLICT DO NOTHING;
  SELECT count(*)::integer FROM kb.document_media m
   WHERE m.kb_id = p_kb_id AND m.document_id = p_document_id;
$$;
COMMENT ON FUNCTION kb._store_media(integer, bigint, jsonb) IS
  'Internal: replaces a document''s media with the given set.';

CREATE OR REPLACE FUNCTION kb._py_file_format(file_name text, head bytea) RETURNS text
LANGUAGE plpython3u IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.file_format(file_name, head)
$$;

CREATE OR REPLACE FUNCTION kb.add_file(
    kb text,
    file_name text,
    data bytea,
    title text DEFAULT NULL,
    metadata jsonb DEFAULT '{}',
    usage_mode text DEFAULT 'rag',
    keep_file boolean DEFAULT true
) RETURNS TABLE (document_id bigint, action text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb     kb.knowledge_base;
  v_title  text := coalesce(title, file_name);
  v_format text;
BEGIN
  v_kb := kb._get_kb_for_write(kb);
  IF kb._blank(file_name) THEN
    RAISE EXCEPTION 'file_name must name the file (its extension says its format)'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM kb._check_document_args(v_title, metadata, usage_mode);
  IF data IS NULL THEN
    RAISE EXCEPTION 'the file of document "%" is NULL', v_title
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM kb._check_file(v_title, data);
  v_format := kb._py_file_format(file_name, substr(data, 1, 512));
  IF v_format IS NULL THEN
    RAISE EXCEPTION 'file "%" has an unsupported type', file_name
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'kbpg converts /*@file_suffixes*/.pdf/*@*/ files';
  END IF;
  RETURN QUERY SELECT * FROM kb._upsert_document(v_kb, v_title, NULL,
    'sha256:' || encode(sha256(data), 'hex'), metadata, NULL, usage_mode, NULL, data,
    file_name, v_format, NULL, keep_file, NULL);
END
$$;
COMMENT ON FUNCTION kb.add_file(text, text, bytea, text, jsonb, text, boolean) IS
  'Adds a file (PDF, DOCX, PPTX, XLSX, XLS, HTML, CSV, JSON, EPUB, ipynb, RSS, Markdown, '
  'text) as a document, or replaces the one with its title (default: the file name); its '
  'indexing job converts it to Markdown, so a file that cannot be converted gets its error '
  'on the document row. The original is kept for reindexing unless keep_file is false. '
  'action is added, replaced or unchanged.';

CREATE OR REPLACE FUNCTION kb.add_url(
    kb text,
    url text,
    title text DEFAULT NULL,
    metadata jsonb DEFAULT '{}',
    usage_mode text DEFAULT 'rag',
    render boolean DEFAULT true
) RETURNS TABLE (document_id bigint, action text)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base;
BEGIN
  v_kb := kb._get_kb_for_write(kb);
  IF url IS NULL OR url !~* '^https?://[^/?#\s]+' OR url ~ '\s' THEN
    RAISE EXCEPTION 'url must be an http or https URL (got %)', coalesce(quote_literal(url), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF length(url) > 4000 THEN
    RAISE EXCEPTION 'url is % characters; the limit is 4000', length(url)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM kb._check_document_args(coalesce(title, url), metadata, usage_mode);
  -- Every call fetches anew: a hash no other version has.
  RETURN QUERY SELECT * FROM kb._upsert_document(v_kb, coalesce(title, url), NULL,
    'url:' || md5(url || clock_timestamp()::text), metadata, url, usage_mode, NULL, NULL, NULL,
    'url', jsonb_build_object('render', coalesce(render, true)), NULL, NULL);
END
$$;
COMMENT ON FUNCTION kb.add_url(text, text, text, jsonb, text, boolean) IS
  'Adds a web page (or a file at a URL) as a document, or fetches it again: the indexing '
  'job fetches it from the database server (at most kb.fetch_timeout_s, 10 redirects), '
  'renders HTML with headless Chromium so script-written text is there (render => false '
  'skips that), and converts it like kb.add_file. source_uri keeps the URL; the fetched '
  'page is kept, so a reindex does not fetch again.';

CREATE OR REPLACE FUNCTION kb._py_convert_document(kb_id integer, document_id bigint)
RETURNS jsonb
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.convert_document(plpy, kb_id, document_id)
$$;
CREATE OR REPLACE FUNCTION kb._convert_document(p_kb_id integer, p_document_id bigint)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN kb._py_convert_document(p_kb_id, p_document_id);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._convert_document(integer, bigint) IS
  'Internal: converts a file or URL document''s original to its text (and media); returns '
  '{"error": ...} when that stops the document, {} when the text is stored, and for a web '
  'source''s page fetched again {"outcome": "unchanged" | "kept" | "gone"}.';

CREATE OR REPLACE FUNCTION kb.media(kb text, ref text, of_document bigint DEFAULT NULL)
RETURNS TABLE (document_id bigint, title text, media_type text, data bytea, sha256 text,
               byte_size bigint)
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb(media.kb);
  v_ref text := regexp_replace(coalesce(media.ref, ''), '^kbpg-media:', '');
BEGIN
  RETURN QUERY
    SELECT m.document_id, d.title, m.media_type, m.data, m.sha256, m.byte_size
    FROM kb.document_media m JOIN kb.document d ON d.id = m.document_id AND d.kb_id = m.kb_id
    WHERE m.kb_id = v_kb.id AND m.ref = v_ref
      AND (of_document IS NULL OR m.document_id = of_document)
    ORDER BY m.document_id
    LIMIT 1;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'media "%" does not exist in knowledge base "%"', ref, kb
      USING ERRCODE = 'no_data_found',
            HINT = 'a reference reads kbpg-media:<16 hex digits>.<extension>';
  END IF;
END
$$;
COMMENT ON FUNCTION kb.media(text, text, bigint) IS
  'A medium taken out of a document''s text (an image that was a base64 data: URI), by its '
  'reference kbpg-media:<ref> as the text shows it: its bytes, type and sha256 (of_document '
  'picks the document where several hold it).';

CREATE OR REPLACE VIEW kb.document_media_list WITH (security_invoker = true) AS
  SELECT k.name AS kb, d.title, m.document_id, 'kbpg-media:' || m.ref AS ref, m.media_type,
         m.byte_size, m.sha256, m.kb_id
  FROM kb.document_media m JOIN kb.document d ON d.kb_id = m.kb_id AND d.id = m.document_id
  JOIN kb.knowledge_base k ON k.id = m.kb_id;
COMMENT ON VIEW kb.document_media_list IS
  'Every stored medium with its document and reference (without the bytes).';
GRANT SELECT ON kb.document_media_list TO PUBLIC;  -- rows as the caller's policies allow
