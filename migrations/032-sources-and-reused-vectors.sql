-- Sources: where a knowledge base's documents come from (a folder or a repository so far),
-- so that a sync adds what is new there, re-indexes what changed, moves what was renamed
-- and removes what is gone. A document keeps its source and its key in it (a path);
-- documents added by hand have neither.
CREATE TABLE kb.source (
    kb_id        integer NOT NULL REFERENCES kb.knowledge_base (id) ON DELETE CASCADE,
    id           bigint GENERATED ALWAYS AS IDENTITY,
    name         text NOT NULL CHECK (name <> '' AND length(name) <= 1000),
    kind         text NOT NULL CHECK (kind IN ('folder', 'repository')),
    locator      text NOT NULL CHECK (locator <> ''),
    config       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(config) = 'object'),
    state        text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'broken')),
    last_sync_at timestamptz,
    last_sync    jsonb,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kb_id, id),
    UNIQUE (kb_id, name)
);
COMMENT ON TABLE kb.source IS
  'Where a knowledge base''s documents come from: a folder or repository that kbpg sync '
  'keeps the KB in step with. kb.sources lists them with their documents'' states.';

ALTER TABLE kb.source ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable ON kb.source FOR SELECT
  USING (kb_id = ANY ((SELECT kb._readable_kbs(current_user))::integer[]));
CREATE POLICY adds ON kb.source FOR INSERT WITH CHECK (kb._can_write(kb_id));
CREATE POLICY changes ON kb.source FOR UPDATE
  USING (kb._can_write(kb_id)) WITH CHECK (kb._can_write(kb_id));
CREATE POLICY removes ON kb.source FOR DELETE USING (kb._can_write(kb_id));
GRANT SELECT, INSERT, UPDATE, DELETE ON kb.source TO PUBLIC;

ALTER TABLE kb.document ADD COLUMN source_id bigint;
ALTER TABLE kb.document ADD COLUMN source_key text;
ALTER TABLE kb.document ADD COLUMN source_hash text;
ALTER TABLE kb.document ADD COLUMN chunks_reused integer NOT NULL DEFAULT 0;
ALTER TABLE kb.document ADD CONSTRAINT document_source_fk
  FOREIGN KEY (kb_id, source_id) REFERENCES kb.source (kb_id, id) ON DELETE CASCADE;
ALTER TABLE kb.document ADD CONSTRAINT document_source_key_check
  CHECK ((source_id IS NULL) = (source_key IS NULL));
CREATE UNIQUE INDEX document_source_key_idx ON kb.document (kb_id, source_id, source_key)
  WHERE source_id IS NOT NULL;

-- Changed documents re-embed only the chunks whose embedded text changed: each chunk keeps
-- the hash of the text its vector was computed from, and a rebuild of the document in the
-- same generation (same model) takes the vector of a chunk whose hash it finds again.
ALTER TABLE kb.chunk ADD COLUMN embed_hash text;
DO $$
BEGIN
  IF to_regtype('kb.chunk_payload') IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('kb.chunk_payload') AND attname = 'embed_hash') THEN
    ALTER TYPE kb.chunk_payload ADD ATTRIBUTE embed_hash text;
  END IF;
  IF to_regtype('kb.build_result') IS NOT NULL AND NOT EXISTS (
       SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass('kb.build_result') AND attname = 'reused') THEN
    ALTER TYPE kb.build_result ADD ATTRIBUTE reused integer;
  END IF;
END
$$;
