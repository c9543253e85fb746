-- Files and web pages converted inside the indexing job (kb.add_file, kb.add_url), and the
-- media taken out of documents' text (kb.document_media, kb.media).

-- A document added as a file or URL has no text until its first job converts it.
ALTER TABLE kb.document ALTER COLUMN content DROP NOT NULL;
ALTER TABLE kb.document ADD COLUMN source_format text;
ALTER TABLE kb.document ADD COLUMN source_meta jsonb;
COMMENT ON COLUMN kb.document.source_format IS
  'How the text is made: the file format (docx, pptx, xlsx, html, csv, json, pdf, ...) that '
  'each indexing job converts from the stored original, or url (fetched once, then kept); '
  'NULL for text given directly.';
COMMENT ON COLUMN kb.document.source_meta IS
  'What conversion found (pages, slides, sheets, outline, page title, URL fetched), read by '
  'the strategies beside the document''s metadata.';

-- keep = false: the original is dropped once converted (the text stays; a reindex reuses it).
ALTER TABLE kb.document_file ADD COLUMN keep boolean NOT NULL DEFAULT true;

CREATE TABLE kb.document_media (
    kb_id       integer NOT NULL REFERENCES kb.knowledge_base (id) ON DELETE CASCADE,
    document_id bigint NOT NULL REFERENCES kb.document (id) ON DELETE CASCADE,
    ref         text NOT NULL,
    media_type  text NOT NULL,
    data        bytea NOT NULL,
    sha256      text NOT NULL,
    byte_size   bigint NOT NULL,
    stored_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kb_id, document_id, ref)
);
ALTER TABLE kb.document_media ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX document_media_document_idx ON kb.document_media (document_id);
CREATE INDEX document_media_ref_idx ON kb.document_media (kb_id, ref);
COMMENT ON TABLE kb.document_media IS
  'Images and other media embedded in documents as base64 data: URIs, stored once per '
  'document; the text holds kbpg-media:<ref> in their place (kb.media returns the bytes).';

ALTER TABLE kb.document_media ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable ON kb.document_media FOR SELECT
  USING (kb_id = ANY ((SELECT kb._readable_kbs(current_user))::integer[]));
CREATE POLICY adds ON kb.document_media FOR INSERT WITH CHECK (kb._can_write(kb_id));
CREATE POLICY changes ON kb.document_media FOR UPDATE
  USING (kb._can_write(kb_id)) WITH CHECK (kb._can_write(kb_id));
CREATE POLICY removes ON kb.document_media FOR DELETE USING (kb._can_write(kb_id));
GRANT SELECT, INSERT, UPDATE, DELETE ON kb.document_media TO PUBLIC;
