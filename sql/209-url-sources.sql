-- Web sources: pages a knowledge base follows. Each page of a source is fetched again every
-- refresh_interval, conditionally (its ETag and Last-Modified): a page that has not
-- changed re-indexes nothing, a page whose text changed re-embeds its changed chunks, a
-- failure keeps the version indexed serving, and a page gone (HTTP 404 or 410) three
-- fetches in a row is removed (kbpg_db.files).

CREATE OR REPLACE FUNCTION kb.add_url_source(
    kb text,
    name text,
    urls text[],
    refresh_interval interval DEFAULT '1 day',
    render boolean DEFAULT true,
    metadata jsonb DEFAULT '{}',
    usage_mode text DEFAULT 'rag'
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb  kb.knowledge_base := kb._get_kb_for_write(add_url_source.kb);
  v_src kb.source;
  v_url text;
  v_doc bigint;
BEGIN
  IF kb._blank(name) OR length(name) > 1000 THEN
    RAISE EXCEPTION 'a source needs a name of 1 to 1000 characters'
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF urls IS NULL OR cardinality(urls) = 0 THEN
    RAISE EXCEPTION 'source "%": urls must name at least one page', name
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF refresh_interval IS NULL OR refresh_interval < interval '1 minute' THEN
    RAISE EXCEPTION 'source "%": refresh_interval must be at least 1 minute (got %)', name,
                    coalesce(refresh_interval::text, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT * INTO v_src FROM kb.source s WHERE s.kb_id = v_kb.id AND s.name = add_url_source.name
    FOR UPDATE;
  IF FOUND AND v_src.kind <> 'url' THEN
    RAISE EXCEPTION 'source "%" of knowledge base "%" already reads % "%"',
                    name, v_kb.name, v_src.kind, v_src.locator
      USING ERRCODE = 'duplicate_object',
            HINT = 'choose another name, or kb.drop_source the old one first';
  ELSIF FOUND THEN
    UPDATE kb.source s
       SET config = jsonb_build_object('refresh_interval', refresh_interval::text,
                                       'render', render),
           locator = urls[1], next_refresh_at = now() + refresh_interval, state = 'active'
     WHERE s.kb_id = v_kb.id AND s.id = v_src.id;
    -- Pages no longer listed go.
    DELETE FROM kb.document d
     WHERE d.kb_id = v_kb.id AND d.source_id = v_src.id AND d.source_key <> ALL (urls);
  ELSE
    INSERT INTO kb.source AS s (kb_id, name, kind, locator, config, next_refresh_at)
    VALUES (v_kb.id, name, 'url', urls[1],
            jsonb_build_object('refresh_interval', refresh_interval::text, 'render', render),
            now() + refresh_interval)
    RETURNING s.* INTO v_src;
  END IF;
  FOREACH v_url IN ARRAY urls LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM kb.document d WHERE d.kb_id = v_kb.id
                             AND d.source_id = v_src.id AND d.source_key = v_url);
    SELECT a.document_id INTO v_doc
      FROM kb.add_url(add_url_source.kb, v_url, NULL, metadata, usage_mode, render) a;
    PERFORM kb.bind_document(add_url_source.kb, add_url_source.name, v_doc, v_url, NULL);
  END LOOP;
  RETURN v_src.id;
END
$$;
COMMENT ON FUNCTION kb.add_url_source(text, text, text[], interval, boolean, jsonb, text) IS
  'Makes web pages a source of a knowledge base: each is fetched now (kb.add_url) and '
  'again every refresh_interval, conditionally; unchanged pages re-index nothing, a '
  'failure keeps the version indexed, a page gone (404, 410) three times in a row is '
  'removed. Called again with the same name, it sets the list: pages no longer listed go. '
  'Returns the source''s id.';

CREATE OR REPLACE FUNCTION kb.refresh_url_sources(force boolean DEFAULT false)
RETURNS TABLE (kb text, source text, queued integer)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_due record;
  v_kbid integer;
  v_src kb.source;
  v_kb  kb.knowledge_base;
  v_doc bigint;
  v_n   integer;
BEGIN
  -- Which sources are due (every KB's, read only); each is then taken as its KB's.
  FOR v_due IN SELECT s.kb_id, s.id FROM kb.source s
                WHERE s.kind = 'url' AND s.state = 'active'
                  AND (force OR s.next_refresh_at <= now())
                ORDER BY s.next_refresh_at LOOP
    v_kbid := v_due.kb_id;
    SELECT * INTO v_src FROM kb.source s
     WHERE s.kb_id = v_kbid AND s.id = v_due.id AND s.state = 'active'
       AND (force OR s.next_refresh_at <= now())
       FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;  -- another worker has it
    SELECT * INTO v_kb FROM kb.knowledge_base k WHERE k.id = v_kbid;
    v_n := 0;
    -- Pages being indexed now are left alone; the others are fetched again.
    FOR v_doc IN SELECT d.id FROM kb.document d
                  WHERE d.kb_id = v_kbid AND d.source_id = v_due.id
                    AND d.status IN ('ready', 'error') LOOP
      UPDATE kb.document d SET source_meta = coalesce(d.source_meta, '{}') || '{"refetch": true}'
       WHERE d.kb_id = v_kbid AND d.id = v_doc;
      PERFORM kb._enqueue_document(v_kb, v_doc);
      v_n := v_n + 1;
    END LOOP;
    UPDATE kb.source s
       SET next_refresh_at = now() + (s.config->>'refresh_interval')::interval,
           last_sync_at = now()
     WHERE s.kb_id = v_kbid AND s.id = v_due.id;
    kb := v_kb.name; source := v_src.name; queued := v_n;
    RETURN NEXT;
  END LOOP;
END
$$;
COMMENT ON FUNCTION kb.refresh_url_sources(boolean) IS
  'Queues a fetch of every page of the web sources that are due (all of them with force); '
  'the worker calls it when idle. One row per source: how many pages were queued.';
