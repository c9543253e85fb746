-- Table sources: an application's own table as a source of a knowledge base. Triggers on
-- the table queue the keys of the rows a statement changed (kb.source_change, one row a
-- statement, in the application's transaction); the worker turns them into documents.
ALTER TABLE kb.source DROP CONSTRAINT source_kind_check;
ALTER TABLE kb.source ADD CONSTRAINT source_kind_check
  CHECK (kind IN ('folder', 'repository', 'table'));
ALTER TABLE kb.source ADD COLUMN relation oid;
ALTER TABLE kb.source ADD COLUMN owner_role text;

CREATE TABLE kb.source_change (
    kb_id      integer NOT NULL,
    source_id  bigint NOT NULL,
    id         bigint GENERATED ALWAYS AS IDENTITY,
    keys       text[],             -- the rows' keys; NULL: the table was truncated
    queued_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kb_id, id)
    -- No foreign key: its check would cost every application statement a lookup.
    -- kb.drop_source and kb.apply_source_changes remove the rows of a source gone.
);
-- Written once a statement of the application's: no index beyond its key, and the keys
-- stored as they are (compressing them costs the application's write more than it saves).
ALTER TABLE kb.source_change ALTER COLUMN keys SET STORAGE EXTERNAL;
COMMENT ON TABLE kb.source_change IS
  'Changes to table sources waiting for the worker: the keys of the rows each statement '
  'inserted, updated or deleted (NULL after a TRUNCATE).';
ALTER TABLE kb.source_change ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable ON kb.source_change FOR SELECT
  USING (kb_id = ANY ((SELECT kb._readable_kbs(current_user))::integer[]));
GRANT SELECT ON kb.source_change TO PUBLIC;
