-- Teams, private knowledge bases and read-only sharing, enforced by row-level security.
--
-- Principals are PostgreSQL roles (current_user: SET ROLE switches it). A knowledge base
-- belongs to a team; a team KB is readable by the team's members and by members of the
-- teams it is shared with (read-only), writable by the team's members; a private KB only by
-- its creator. Every table that holds KB data or reveals it has a policy. Read policies ask
-- kb._readable_kbs / kb._readable_indexes once per statement; write policies ask
-- kb._can_write per row (writes are few: the worker, which bypasses them, writes chunks). The table owner (the role
-- that runs kbpg migrate, which the indexing worker uses) and superusers bypass row-level
-- security, as PostgreSQL does for owners; applications connect as other roles. Existing
-- installs keep working: their KBs join the team "default", whose admin is the migrating role.

CREATE TABLE kb.team (
    id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (btrim(name) <> '' AND length(name) <= 200),
    created_by  name NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.team IS
  'Teams: a knowledge base belongs to one. Managed with kb.create_team, kb.add_team_member.';

CREATE TABLE kb.team_member (
    team_id   integer NOT NULL REFERENCES kb.team (id) ON DELETE CASCADE,
    member    name NOT NULL,
    role      text NOT NULL DEFAULT 'member' CHECK (role IN ('member', 'admin')),
    added_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, member)
);
CREATE INDEX team_member_member_idx ON kb.team_member (member);
COMMENT ON TABLE kb.team_member IS
  'Team membership of PostgreSQL roles (member or admin). A role sees its own rows.';

CREATE TABLE kb.kb_share (
    kb_id       integer NOT NULL REFERENCES kb.knowledge_base (id) ON DELETE CASCADE,
    team_id     integer NOT NULL REFERENCES kb.team (id) ON DELETE CASCADE,
    permission  text NOT NULL DEFAULT 'read_only' CHECK (permission = 'read_only'),
    shared_by   name NOT NULL,
    shared_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kb_id, team_id)
);
CREATE INDEX kb_share_team_idx ON kb.kb_share (team_id);
COMMENT ON TABLE kb.kb_share IS
  'Read-only shares of team knowledge bases with other teams (kb.share_knowledge_base).';

INSERT INTO kb.team (name, created_by) VALUES ('default', current_user);
INSERT INTO kb.team_member (team_id, member, role)
  SELECT id, current_user, 'admin' FROM kb.team WHERE name = 'default';

ALTER TABLE kb.knowledge_base
  ADD COLUMN team_id integer REFERENCES kb.team (id),
  ADD COLUMN visibility text NOT NULL DEFAULT 'team' CHECK (visibility IN ('team', 'private')),
  ADD COLUMN created_by name NOT NULL DEFAULT current_user;
UPDATE kb.knowledge_base SET team_id = (SELECT id FROM kb.team WHERE name = 'default');
ALTER TABLE kb.knowledge_base ALTER COLUMN team_id SET NOT NULL;
CREATE INDEX knowledge_base_team_idx ON kb.knowledge_base (team_id);

-- The listing gains include_shared / own_only / team; sql/ recreates it.
DROP FUNCTION IF EXISTS kb.list_knowledge_bases();
DROP FUNCTION IF EXISTS kb.create_knowledge_base(text, jsonb, jsonb, text);

-- Read rights, once per statement: the KBs (and their index generations) a role can read.
-- SECURITY DEFINER so a policy costs one lookup, not a chain of policies over team_member,
-- kb_share and knowledge_base per scanned row; the role is passed in (current_user, in the
-- policy), and a session that cannot act as that role gets nothing.
CREATE FUNCTION kb._readable_kbs(p_role name) RETURNS integer[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce(array_agg(k.id), '{}')
  FROM kb.knowledge_base k
  WHERE pg_has_role(session_user, p_role, 'MEMBER')
    AND (k.created_by = p_role
         OR (k.visibility = 'team'
             AND (k.team_id IN (SELECT m.team_id FROM kb.team_member m WHERE m.member = p_role)
                  OR k.id IN (SELECT s.kb_id FROM kb.kb_share s
                                JOIN kb.team_member m ON m.team_id = s.team_id
                               WHERE m.member = p_role))))
$$;
COMMENT ON FUNCTION kb._readable_kbs(name) IS
  'Internal: ids of the KBs a role can read (its teams'', its private ones, shared with it).';

CREATE FUNCTION kb._readable_indexes(p_role name) RETURNS bigint[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce(array_agg(i.id), '{}') FROM kb.kb_index i
  WHERE i.kb_id = ANY (kb._readable_kbs(p_role))
$$;
COMMENT ON FUNCTION kb._readable_indexes(name) IS
  'Internal: ids of the index generations of the KBs a role can read.';

-- Write rights, for the write policies. A placeholder here so the policies can name it;
-- sql/050-teams.sql defines the body (CREATE OR REPLACE keeps the function the policies use).
CREATE FUNCTION kb._can_write(p_kb_id integer) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT false $$;

CREATE FUNCTION kb._can_write_index(p_index_id bigint) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT kb._can_write((SELECT i.kb_id FROM kb.kb_index i WHERE i.id = p_index_id)) $$;
COMMENT ON FUNCTION kb._can_write_index(bigint) IS
  'Internal: kb._can_write for the KB of an index generation.';

ALTER TABLE kb.team ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.team_member ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.kb_share ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.knowledge_base ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.kb_index ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.document ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.job ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.chunk ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.embedding ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.posting ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.term_stat ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.page_index_node ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.page_index_toc ENABLE ROW LEVEL SECURITY;
ALTER TABLE kb.llm_call ENABLE ROW LEVEL SECURITY;  -- no policy: owner only (and definers)

CREATE POLICY own_rows ON kb.team_member FOR SELECT USING (member = current_user);
CREATE POLICY my_teams ON kb.team FOR SELECT
  USING (id IN (SELECT m.team_id FROM kb.team_member m));
CREATE POLICY to_my_teams ON kb.kb_share FOR SELECT
  USING (team_id IN (SELECT m.team_id FROM kb.team_member m));

-- (created_by: its creator always sees a KB, also the row being inserted, which the
-- statement's snapshot of kb._readable_kbs does not hold yet.)
CREATE POLICY readable ON kb.knowledge_base FOR SELECT
  USING (created_by = current_user
         OR id = ANY ((SELECT kb._readable_kbs(current_user))::integer[]));
CREATE POLICY create_in_my_team ON kb.knowledge_base FOR INSERT
  WITH CHECK (created_by = current_user
              AND team_id IN (SELECT m.team_id FROM kb.team_member m));
CREATE POLICY writable ON kb.knowledge_base FOR UPDATE
  USING (kb._can_write(id)) WITH CHECK (kb._can_write(id));
CREATE POLICY droppable ON kb.knowledge_base FOR DELETE
  USING (created_by = current_user
         OR (visibility = 'team'
             AND team_id IN (SELECT m.team_id FROM kb.team_member m WHERE m.role = 'admin')));

-- Tables keyed by KB or by index generation: read where the KB is readable, write (one
-- policy per command, so reads never evaluate the write check) where it is writable.
DO $$
DECLARE
  t text;
  k text;
  w text;
BEGIN
  FOREACH t IN ARRAY ARRAY['kb_index', 'document', 'job', 'chunk', 'embedding', 'posting',
                           'term_stat', 'page_index_node', 'page_index_toc'] LOOP
    IF t IN ('kb_index', 'document', 'job') THEN
      k := 'kb_id = ANY ((SELECT kb._readable_kbs(current_user))::integer[])';
      w := 'kb._can_write(kb_id)';
    ELSE
      k := 'index_id = ANY ((SELECT kb._readable_indexes(current_user))::bigint[])';
      w := 'kb._can_write_index(index_id)';
    END IF;
    EXECUTE format('CREATE POLICY readable ON kb.%I FOR SELECT USING (%s)', t, k);
    EXECUTE format('CREATE POLICY adds ON kb.%I FOR INSERT WITH CHECK (%s)', t, w);
    EXECUTE format('CREATE POLICY changes ON kb.%I FOR UPDATE USING (%s) WITH CHECK (%s)',
                   t, w, w);
    EXECUTE format('CREATE POLICY removes ON kb.%I FOR DELETE USING (%s)', t, w);
  END LOOP;
END
$$;

-- Privileges: every role may use kbpg; row-level security decides which rows. Teams and
-- shares change only through kb's SECURITY DEFINER functions; the LLM call cache is read
-- and written through them too (kb._llm_cache_get / _llm_cache_put). To limit kbpg to some
-- roles, REVOKE USAGE ON SCHEMA kb FROM PUBLIC and grant it to them.
GRANT USAGE ON SCHEMA kb TO PUBLIC;
GRANT SELECT ON kb.team, kb.team_member, kb.kb_share, kb.setting, kb.version TO PUBLIC;
GRANT SELECT, INSERT, DELETE ON kb.knowledge_base TO PUBLIC;
GRANT UPDATE (name, description, indexing_config, retrieval_config, embedding_model,
              embedding_dim, active_index_id, updated_at) ON kb.knowledge_base TO PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON kb.kb_index, kb.document, kb.job, kb.chunk,
  kb.embedding, kb.posting, kb.term_stat, kb.page_index_node, kb.page_index_toc TO PUBLIC;
