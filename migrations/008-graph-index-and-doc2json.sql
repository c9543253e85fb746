-- GraphIndex: cross-references between PageIndex sections, and the search results'
-- expansion along them. Doc2JSON: structured fields extracted per document.

-- One edge per (referring section, referenced section) of one document; both are nodes of
-- kb.page_index_node (GraphIndex stores its tree there) and chunks of the generation.
CREATE TABLE kb.graph_index_edge (
    index_id        bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    document_id     bigint NOT NULL REFERENCES kb.document (id) ON DELETE CASCADE,
    source_chunk_id bigint NOT NULL REFERENCES kb.chunk (id) ON DELETE CASCADE,
    target_chunk_id bigint NOT NULL REFERENCES kb.chunk (id) ON DELETE CASCADE,
    ordinal         integer NOT NULL,  -- the order the source's references were found in
    kind            text NOT NULL CHECK (kind IN ('cites', 'mentions', 'depends_on')),
    phrase          text NOT NULL,
    resolved_by     text NOT NULL CHECK (resolved_by IN ('rule', 'llm')),
    PRIMARY KEY (source_chunk_id, target_chunk_id)
);
CREATE INDEX graph_index_edge_target_idx ON kb.graph_index_edge (target_chunk_id);
CREATE INDEX graph_index_edge_document_idx ON kb.graph_index_edge (document_id);
COMMENT ON TABLE kb.graph_index_edge IS
  'GraphIndex cross-references: the section (chunk) whose text refers to another section of '
  'the same document, how (cites, mentions, depends_on), the words that make the reference, '
  'and whether a rule (an explicit "Section 4.2", "§ 3", anchor link) or the LLM resolved it.';

-- Search results gain the expansion columns: drop the functions; sql/ recreates them.
DO $$
DECLARE
  r regprocedure;
BEGIN
  FOR r IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'kb'::regnamespace
              AND p.proname IN ('search', 'explain_search', '_search_core', '_search_rows') LOOP
    EXECUTE 'DROP FUNCTION ' || r;
  END LOOP;
END
$$;

-- The original file a document was loaded from (a PDF today), for strategies that read it:
-- Doc2JSON's image mode renders its pages. Stored uncompressed (PDFs compress themselves).
CREATE TABLE kb.document_file (
    document_id bigint PRIMARY KEY REFERENCES kb.document (id) ON DELETE CASCADE,
    kb_id       integer NOT NULL REFERENCES kb.knowledge_base (id) ON DELETE CASCADE,
    file_name   text NOT NULL,
    media_type  text NOT NULL,
    data        bytea NOT NULL,
    sha256      text NOT NULL,
    byte_size   bigint NOT NULL,
    stored_at   timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE kb.document_file ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX document_file_kb_idx ON kb.document_file (kb_id);
COMMENT ON TABLE kb.document_file IS
  'The original bytes of a document''s file (kb.put_document(..., file => ...)), kept so a '
  'strategy that reads the file itself (Doc2JSON image mode) needs no re-upload.';

-- Doc2JSON: one row per document and index generation; the document's one chunk holds the
-- summary (embedded) and the fields as text.
CREATE TABLE kb.doc2json_document (
    index_id    bigint NOT NULL REFERENCES kb.kb_index (id) ON DELETE CASCADE,
    document_id bigint NOT NULL REFERENCES kb.document (id) ON DELETE CASCADE,
    chunk_id    bigint NOT NULL REFERENCES kb.chunk (id) ON DELETE CASCADE,
    fields      jsonb NOT NULL,
    summary     text NOT NULL,
    sources     jsonb NOT NULL,
    errors      jsonb NOT NULL,
    windows     jsonb NOT NULL,
    mode        text NOT NULL CHECK (mode IN ('text', 'image')),
    PRIMARY KEY (index_id, document_id)
);
CREATE INDEX doc2json_document_chunk_idx ON kb.doc2json_document (chunk_id);
CREATE INDEX doc2json_document_document_idx ON kb.doc2json_document (document_id);
COMMENT ON TABLE kb.doc2json_document IS
  'Doc2JSON extractions: the merged fields (query them directly: fields->>''vendor_name''), the '
  'document summary, per value the window it came from and its character span (sources), '
  'values refused for their type (errors), and the windows with their summaries.';

-- Row-level security as on every table that holds KB data (migration 007): read where the
-- KB is readable, write where it is writable.
DO $$
DECLARE
  t text;
  k text;
  w text;
BEGIN
  FOREACH t IN ARRAY ARRAY['graph_index_edge', 'document_file', 'doc2json_document'] LOOP
    IF t = 'document_file' THEN
      k := 'kb_id = ANY ((SELECT kb._readable_kbs(current_user))::integer[])';
      w := 'kb._can_write(kb_id)';
    ELSE
      k := 'index_id = ANY ((SELECT kb._readable_indexes(current_user))::bigint[])';
      w := 'kb._can_write_index(index_id)';
    END IF;
    EXECUTE format('ALTER TABLE kb.%I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY readable ON kb.%I FOR SELECT USING (%s)', t, k);
    EXECUTE format('CREATE POLICY adds ON kb.%I FOR INSERT WITH CHECK (%s)', t, w);
    EXECUTE format('CREATE POLICY changes ON kb.%I FOR UPDATE USING (%s) WITH CHECK (%s)',
                   t, w, w);
    EXECUTE format('CREATE POLICY removes ON kb.%I FOR DELETE USING (%s)', t, w);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON kb.%I TO PUBLIC', t);
  END LOOP;
END
$$;

-- kb.put_document takes the file; a build step reads it: new parameter lists.
DROP FUNCTION IF EXISTS kb.add_document(text, text, text, jsonb, text, text, integer[]);
DROP FUNCTION IF EXISTS kb.put_document(text, text, text, jsonb, text, text, integer[]);
DROP FUNCTION IF EXISTS kb._build_document(text, text, jsonb, integer[], jsonb);
DROP FUNCTION IF EXISTS kb._py_build_document(text, text, jsonb, integer[], jsonb);
