-- Web sources: pages a knowledge base fetches again on a schedule (kb.add_url_source).
ALTER TABLE kb.source DROP CONSTRAINT source_kind_check;
ALTER TABLE kb.source ADD CONSTRAINT source_kind_check
  CHECK (kind IN ('folder', 'repository', 'table', 'url'));
ALTER TABLE kb.source ADD COLUMN next_refresh_at timestamptz;
CREATE INDEX source_refresh_idx ON kb.source (next_refresh_at) WHERE kind = 'url';
