-- Test sets for the Retrieval Lab (kbpg lab) and kb.run_test_set: saved queries with the
-- documents or sections they should find, and the scored runs of configurations over them.
CREATE TABLE kb.test_set (
    kb_id       integer NOT NULL REFERENCES kb.knowledge_base (id) ON DELETE CASCADE,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    name        text NOT NULL CHECK (btrim(name) <> '' AND length(name) <= 200),
    description text NOT NULL DEFAULT '',
    created_by  name NOT NULL DEFAULT current_user,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kb_id, id),
    UNIQUE (kb_id, name)
);
COMMENT ON TABLE kb.test_set IS
  'A named set of test queries of one knowledge base (kb.create_test_set).';

CREATE TABLE kb.test_query (
    kb_id       integer NOT NULL,
    test_set_id bigint NOT NULL,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    query       text NOT NULL CHECK (btrim(query) <> ''),
    expected    text[] NOT NULL CHECK (cardinality(expected) > 0),
    PRIMARY KEY (kb_id, id),
    FOREIGN KEY (kb_id, test_set_id) REFERENCES kb.test_set (kb_id, id) ON DELETE CASCADE
);
CREATE INDEX test_query_set_idx ON kb.test_query (kb_id, test_set_id);
COMMENT ON TABLE kb.test_query IS
  'A test query and what it should find: document titles, or sections written '
  '"title › heading › subheading" (a result in that section or below it counts).';

CREATE TABLE kb.test_run (
    kb_id       integer NOT NULL,
    test_set_id bigint NOT NULL,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    config      jsonb NOT NULL,
    metrics     jsonb NOT NULL,
    queries     jsonb NOT NULL,
    created_by  name NOT NULL DEFAULT current_user,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kb_id, id),
    FOREIGN KEY (kb_id, test_set_id) REFERENCES kb.test_set (kb_id, id) ON DELETE CASCADE
);
CREATE INDEX test_run_set_idx ON kb.test_run (kb_id, test_set_id);
COMMENT ON TABLE kb.test_run IS
  'One configuration scored over a test set: Success@1/@5, MRR@10, nDCG@10 and each query''s '
  'outcome (kb.run_test_set).';

DO $$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['test_set', 'test_query', 'test_run'] LOOP
    EXECUTE format('ALTER TABLE kb.%I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY readable ON kb.%I FOR SELECT USING '
                   '(kb_id = ANY ((SELECT kb._readable_kbs(current_user))::integer[]))', t);
    EXECUTE format('CREATE POLICY adds ON kb.%I FOR INSERT WITH CHECK (kb._can_write(kb_id))', t);
    EXECUTE format('CREATE POLICY changes ON kb.%I FOR UPDATE USING (kb._can_write(kb_id)) '
                   'WITH CHECK (kb._can_write(kb_id))', t);
    EXECUTE format('CREATE POLICY removes ON kb.%I FOR DELETE USING (kb._can_write(kb_id))', t);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON kb.%I TO PUBLIC', t);
  END LOOP;
END
$$;
