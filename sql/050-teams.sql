-- Teams, private knowledge bases and read-only sharing (migration 007 holds the tables and
-- the row-level security policies). Principals are PostgreSQL roles: current_user, which
-- SET ROLE switches. The functions that change teams and shares are SECURITY DEFINER:
-- they take the acting role as acting_as DEFAULT current_user (the default is evaluated
-- in the caller's context) and accept another role only when the session's login role may act as it
-- (pg_has_role(session_user, acting_as, 'MEMBER'), so an application connected as a role
-- granted its users' roles can act for them, and nobody else can).

CREATE OR REPLACE FUNCTION kb._check_actor(acting_as name) RETURNS name
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF acting_as IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = acting_as) THEN
    RAISE EXCEPTION 'role "%" does not exist', coalesce(acting_as::text, 'NULL')
      USING ERRCODE = 'undefined_object';
  END IF;
  IF NOT pg_has_role(session_user, acting_as, 'MEMBER') THEN
    RAISE EXCEPTION 'role "%" cannot act as role "%"', session_user, acting_as
      USING ERRCODE = 'insufficient_privilege',
            HINT = 'leave acting_as out to act as yourself';
  END IF;
  RETURN acting_as;
END
$$;
COMMENT ON FUNCTION kb._check_actor(name) IS
  'Internal: the acting role of a SECURITY DEFINER function, if the session may act as it.';

CREATE OR REPLACE FUNCTION kb._sees_all(p_role name) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce((SELECT r.rolsuper OR r.rolbypassrls FROM pg_roles r WHERE r.rolname = p_role),
                  false)
      OR pg_has_role(p_role, (SELECT c.relowner FROM pg_class c
                               WHERE c.oid = 'kb.knowledge_base'::regclass), 'MEMBER')
$$;
COMMENT ON FUNCTION kb._sees_all(name) IS
  'Internal: does this role bypass row-level security on kb (superuser, BYPASSRLS, owner)?';

CREATE OR REPLACE FUNCTION kb._can_write_as(p_kb_id integer, p_role name) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT EXISTS (
    SELECT 1 FROM kb.knowledge_base k
     WHERE k.id = p_kb_id
       AND (kb._sees_all(p_role)
            OR CASE WHEN k.visibility = 'private' THEN k.created_by = p_role
                    ELSE EXISTS (SELECT 1 FROM kb.team_member m
                                  WHERE m.team_id = k.team_id AND m.member = p_role) END))
$$;
COMMENT ON FUNCTION kb._can_write_as(integer, name) IS
  'Internal: may this role change the KB (a member of its team; its creator if private)?';

CREATE OR REPLACE FUNCTION kb._can_write(p_kb_id integer) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT kb._can_write_as(p_kb_id, current_user) $$;
COMMENT ON FUNCTION kb._can_write(integer) IS
  'Internal: may the current role change this KB? (The write policies call it.)';

CREATE OR REPLACE FUNCTION kb._can_write_index(p_index_id bigint) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT kb._can_write((SELECT i.kb_id FROM kb.kb_index i WHERE i.id = p_index_id)) $$;
COMMENT ON FUNCTION kb._can_write_index(bigint) IS
  'Internal: kb._can_write for the KB of an index generation.';

-- Read rights, once per statement: the KBs (and their index generations) a role can read.
-- SECURITY DEFINER so a policy costs one lookup, not a chain of policies over team_member,
-- kb_share and knowledge_base per scanned row; the role is passed in (current_user, in the
-- policy), and a session that cannot act as that role gets nothing.
CREATE OR REPLACE FUNCTION kb._readable_kbs(p_role name) RETURNS integer[]
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

CREATE OR REPLACE FUNCTION kb._readable_indexes(p_role name) RETURNS bigint[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT coalesce(array_agg(i.id), '{}') FROM kb.kb_index i
  WHERE i.kb_id = ANY (kb._readable_kbs(p_role))
$$;
COMMENT ON FUNCTION kb._readable_indexes(name) IS
  'Internal: ids of the index generations of the KBs a role can read.';

CREATE OR REPLACE FUNCTION kb._can_manage_as(p_kb kb.knowledge_base, p_role name) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT kb._sees_all(p_role) OR p_kb.created_by = p_role
      OR (p_kb.visibility = 'team'
          AND EXISTS (SELECT 1 FROM kb.team_member m
                       WHERE m.team_id = p_kb.team_id AND m.member = p_role AND m.role = 'admin'))
$$;
COMMENT ON FUNCTION kb._can_manage_as(kb.knowledge_base, name) IS
  'Internal: may this role drop or share the KB (its creator, or an admin of its team)?';

CREATE OR REPLACE FUNCTION kb._team_name(p_team_id integer, p_role name DEFAULT current_user)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT t.name FROM kb.team t
  WHERE t.id = p_team_id
    AND pg_has_role(session_user, p_role, 'MEMBER')
    AND (kb._sees_all(p_role)
         OR EXISTS (SELECT 1 FROM kb.team_member m WHERE m.team_id = t.id AND m.member = p_role)
         OR EXISTS (SELECT 1 FROM kb.knowledge_base k
                     WHERE k.team_id = t.id AND k.id = ANY (kb._readable_kbs(p_role))))
$$;
COMMENT ON FUNCTION kb._team_name(integer, name) IS
  'Internal: the name of a team the role belongs to or reads a KB of, for messages and '
  'listings (teams are otherwise visible to their members only).';

CREATE OR REPLACE FUNCTION kb._get_kb_for_write(kb_name text) RETURNS kb.knowledge_base
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v kb.knowledge_base;
BEGIN
  v := kb._get_kb(kb_name);  -- no_data_found unless the caller can read it
  IF NOT kb._can_write_as(v.id, current_user) THEN
    RAISE EXCEPTION 'knowledge base "%" is shared with your team read-only', kb_name
      USING ERRCODE = 'insufficient_privilege',
            HINT = format('changing it needs membership in its team "%s"', kb._team_name(v.team_id));
  END IF;
  RETURN v;
END
$$;
COMMENT ON FUNCTION kb._get_kb_for_write(text) IS
  'Internal: kb._get_kb for a change: insufficient_privilege on a KB shared read-only.';

CREATE OR REPLACE FUNCTION kb._require_manage(v kb.knowledge_base, p_what text,
                                              p_role name DEFAULT current_user) RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT kb._can_manage_as(v, p_role) THEN
    RAISE EXCEPTION 'only its creator or an admin of team "%" can % knowledge base "%"',
                    kb._team_name(v.team_id), p_what, v.name
      USING ERRCODE = 'insufficient_privilege';
  END IF;
END
$$;
COMMENT ON FUNCTION kb._require_manage(kb.knowledge_base, text, name) IS
  'Internal: insufficient_privilege unless the role may drop, share or unshare the KB.';

-- The HNSW indexes of an index generation are DDL on kb.embedding and kb.term_vector,
-- which only their owner may run. They follow the generation's kb.kb_index row: a
-- trigger (SECURITY DEFINER, and a trigger function cannot be called on its own) creates
-- them when the row is inserted and drops them when the row goes, whichever way it goes
-- (kb.drop_knowledge_base, a failed reindex, a DELETE FROM kb.knowledge_base). Who may
-- insert or delete that row is the kb_index policies' call: the KB's writers.
CREATE OR REPLACE FUNCTION kb._kb_index_hnsw() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_typ text;
BEGIN
  IF TG_OP = 'DELETE' THEN
    EXECUTE format('DROP INDEX IF EXISTS kb.%I', 'embedding_hnsw_' || OLD.id);
    EXECUTE format('DROP INDEX IF EXISTS kb.%I', 'term_vector_hnsw_' || OLD.id);
    RETURN NULL;
  END IF;
  IF NEW.embedding_dim > 4000 THEN
    RAISE EXCEPTION 'embedding dimension % is over 4000, the most an HNSW index takes (halfvec)',
                    NEW.embedding_dim
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  v_typ := kb._vector_type(NEW.embedding_dim);
  -- ef_construction 256 (pgvector's default is 64): on the bench's 100k synthetic vectors
  -- (3 draws of 200 queries) recall@10 at ef_search 100 is 0.992-0.998, above 128's at
  -- 200 (0.98-0.998, with whole misses) and 64's (0.90-0.97), and ef_search 100 is the
  -- default on these graphs (kb._hnsw_default_ef); building and inserting cost more
  -- (docs/performance.md).
  EXECUTE format(
    'CREATE INDEX IF NOT EXISTS %I ON kb.embedding USING hnsw ((embedding::%s(%s)) %s) '
    'WITH (ef_construction = 256) WHERE index_id = %s',
    'embedding_hnsw_' || NEW.id, v_typ, NEW.embedding_dim, v_typ || '_cosine_ops', NEW.id);
  -- Term expansion's words (kb.term_vector, a few thousand per generation): pgvector's
  -- default build settings.
  EXECUTE format(
    'CREATE INDEX IF NOT EXISTS %I ON kb.term_vector USING hnsw ((embedding::%s(%s)) %s) '
    'WHERE index_id = %s',
    'term_vector_hnsw_' || NEW.id, v_typ, NEW.embedding_dim, v_typ || '_cosine_ops', NEW.id);
  RETURN NULL;
END
$$;
COMMENT ON FUNCTION kb._kb_index_hnsw() IS
  'Internal (trigger on kb.kb_index): creates an index generation''s partial HNSW indexes '
  '(its chunks'' vectors, its words'' for term expansion) with its row and drops them with its '
  'row (owner DDL; the row''s policies decide who may).';

-- --- teams -------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION kb._get_team(p_name text) RETURNS kb.team
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v kb.team;
BEGIN
  SELECT * INTO v FROM kb.team t WHERE t.name = p_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'team "%" does not exist', p_name
      USING ERRCODE = 'no_data_found', HINT = 'kb.list_teams() lists yours';
  END IF;
  RETURN v;
END
$$;
COMMENT ON FUNCTION kb._get_team(text) IS 'Internal: a team by name (definer context).';

CREATE OR REPLACE FUNCTION kb._require_team_admin(v_team kb.team, p_role name) RETURNS kb.team
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT kb._sees_all(p_role) AND NOT EXISTS (
       SELECT 1 FROM kb.team_member m
        WHERE m.team_id = v_team.id AND m.member = p_role AND m.role = 'admin') THEN
    RAISE EXCEPTION 'only an admin of team "%" can change its members', v_team.name
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN v_team;
END
$$;
COMMENT ON FUNCTION kb._require_team_admin(kb.team, name) IS
  'Internal: the team, or insufficient_privilege unless the role administers it.';

CREATE OR REPLACE FUNCTION kb._team_administered_by(p_team text, p_role name) RETURNS kb.team
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM kb._check_actor(p_role);
  RETURN kb._require_team_admin(kb._get_team(p_team), p_role);
END
$$;
COMMENT ON FUNCTION kb._team_administered_by(text, name) IS
  'Internal: the preamble of a change to a team''s members: the acting role checked, the '
  'team found, and the role its admin.';

CREATE OR REPLACE FUNCTION kb.create_team(name text, acting_as name DEFAULT current_user)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_id integer;
BEGIN
  PERFORM kb._check_actor(acting_as);
  IF kb._blank(name) OR length(name) > 200 THEN
    RAISE EXCEPTION 'team name must be 1 to 200 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF EXISTS (SELECT 1 FROM kb.team t WHERE t.name = create_team.name) THEN
    RAISE EXCEPTION 'team "%" already exists', name USING ERRCODE = 'unique_violation';
  END IF;
  INSERT INTO kb.team (name, created_by) VALUES (create_team.name, acting_as) RETURNING id INTO v_id;
  INSERT INTO kb.team_member (team_id, member, role) VALUES (v_id, acting_as, 'admin');
  RETURN v_id;
END
$$;
COMMENT ON FUNCTION kb.create_team(text, name) IS
  'Creates a team; the acting role (you, unless acting_as names a role your session may act '
  'as) becomes its admin. Returns its id.';

CREATE OR REPLACE FUNCTION kb.add_team_member(team text, member name, role text DEFAULT 'member',
                                              acting_as name DEFAULT current_user)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_team kb.team;
BEGIN
  v_team := kb._team_administered_by(team, acting_as);
  IF role IS NULL OR role NOT IN ('member', 'admin') THEN
    RAISE EXCEPTION 'role must be member or admin (got %)', coalesce(quote_literal(role), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF member IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = member) THEN
    RAISE EXCEPTION 'role "%" does not exist', coalesce(member::text, 'NULL')
      USING ERRCODE = 'undefined_object', HINT = 'team members are PostgreSQL roles (CREATE ROLE)';
  END IF;
  INSERT INTO kb.team_member AS m (team_id, member, role)
  VALUES (v_team.id, add_team_member.member, add_team_member.role)
  ON CONFLICT ON CONSTRAINT team_member_pkey DO UPDATE SET role = EXCLUDED.role;
END
$$;
COMMENT ON FUNCTION kb.add_team_member(text, name, text, name) IS
  'Adds a PostgreSQL role to a team as member or admin (or changes its role there). Team '
  'admins only.';

CREATE OR REPLACE FUNCTION kb.remove_team_member(team text, member name,
                                                 acting_as name DEFAULT current_user)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_team kb.team;
BEGIN
  v_team := kb._team_administered_by(team, acting_as);
  -- Off-boarding must not fail silently: a mistyped role, or one not in the team, is an
  -- error. (A member row whose role was dropped since is still removed.)
  IF NOT EXISTS (SELECT 1 FROM kb.team_member m
                  WHERE m.team_id = v_team.id AND m.member = remove_team_member.member) THEN
    IF member IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = member) THEN
      RAISE EXCEPTION 'role "%" does not exist', coalesce(member::text, 'NULL')
        USING ERRCODE = 'undefined_object',
              HINT = 'team members are PostgreSQL roles (\du in psql lists them)';
    END IF;
    RAISE EXCEPTION 'role "%" is not a member of team "%"', member, team
      USING ERRCODE = 'no_data_found', HINT = 'check the role''s name: nothing was removed';
  END IF;
  IF EXISTS (SELECT 1 FROM kb.team_member m
              WHERE m.team_id = v_team.id AND m.member = remove_team_member.member
                AND m.role = 'admin')
     AND (SELECT count(*) FROM kb.team_member m
           WHERE m.team_id = v_team.id AND m.role = 'admin') = 1 THEN
    RAISE EXCEPTION 'role "%" is the last admin of team "%"', member, team
      USING ERRCODE = 'object_in_use', HINT = 'make another member admin first';
  END IF;
  DELETE FROM kb.team_member m WHERE m.team_id = v_team.id AND m.member = remove_team_member.member;
  RETURN true;
END
$$;
COMMENT ON FUNCTION kb.remove_team_member(text, name, name) IS
  'Removes a role from a team (team admins only; never its last admin). Errors: 42704 for a '
  'role that does not exist, P0002 for one that is not in the team.';

CREATE OR REPLACE FUNCTION kb.list_teams()
RETURNS TABLE (team text, role text, members bigint, knowledge_bases bigint)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT t.name, m.role,
         (SELECT count(*) FROM kb.team_member x WHERE x.team_id = t.id),
         (SELECT count(*) FROM kb.knowledge_base k WHERE k.team_id = t.id)
  FROM kb.team t JOIN kb.team_member m ON m.team_id = t.id AND m.member = current_user
  ORDER BY t.name
$$;
COMMENT ON FUNCTION kb.list_teams() IS
  'The current role''s teams with its role there (member counts show your own row unless '
  'you see all).';

-- --- sharing -------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION kb._kb_visible_to(p_name text, p_role name) RETURNS kb.knowledge_base
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v kb.knowledge_base;
BEGIN
  SELECT * INTO v FROM kb.knowledge_base k
   WHERE k.name = p_name
     AND (kb._sees_all(p_role) OR k.created_by = p_role
          OR (k.visibility = 'team'
              AND (EXISTS (SELECT 1 FROM kb.team_member m
                            WHERE m.team_id = k.team_id AND m.member = p_role)
                   OR EXISTS (SELECT 1 FROM kb.kb_share s JOIN kb.team_member m
                                ON m.team_id = s.team_id AND m.member = p_role
                               WHERE s.kb_id = k.id))));
  IF NOT FOUND THEN
    RAISE EXCEPTION 'knowledge base "%" does not exist', p_name
      USING ERRCODE = 'no_data_found', HINT = 'kb.list_knowledge_bases() lists them';
  END IF;
  RETURN v;
END
$$;
COMMENT ON FUNCTION kb._kb_visible_to(text, name) IS
  'Internal: a KB by name as the role would see it under row-level security (definer context).';

CREATE OR REPLACE FUNCTION kb._kb_acted_on(p_name text, p_role name, p_manage text DEFAULT NULL)
RETURNS kb.knowledge_base
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v kb.knowledge_base;
BEGIN
  PERFORM kb._check_actor(p_role);
  v := kb._kb_visible_to(p_name, p_role);
  IF p_manage IS NOT NULL THEN
    PERFORM kb._require_manage(v, p_manage, p_role);
  END IF;
  RETURN v;
END
$$;
COMMENT ON FUNCTION kb._kb_acted_on(text, name, text) IS
  'Internal: the preamble of a SECURITY DEFINER function on a KB: the acting role checked, '
  'the KB as it sees it, and (p_manage: the action, e.g. share) that it may manage the KB.';

CREATE OR REPLACE FUNCTION kb.share_knowledge_base(kb text, team text,
                                                   permission text DEFAULT 'read_only',
                                                   acting_as name DEFAULT current_user)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb   kb.knowledge_base;
  v_team kb.team;
BEGIN
  v_kb := kb._kb_acted_on(kb, acting_as, 'share');
  IF permission IS DISTINCT FROM 'read_only' THEN
    RAISE EXCEPTION 'permission must be read_only (got %)', coalesce(quote_literal(permission), 'NULL')
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'sharing is read-only; writes need membership in the owning team';
  END IF;
  IF v_kb.visibility = 'private' THEN
    RAISE EXCEPTION 'private_kb_cannot_be_shared: knowledge base "%" is private', kb
      USING ERRCODE = 'KB010', HINT = 'only its creator sees a private knowledge base';
  END IF;
  v_team := kb._get_team(team);
  IF v_team.id = v_kb.team_id THEN
    RAISE EXCEPTION 'kb_shared_with_owning_team: knowledge base "%" belongs to team "%"', kb, team
      USING ERRCODE = 'KB011', HINT = 'its own team has access already';
  END IF;
  IF EXISTS (SELECT 1 FROM kb.kb_share s WHERE s.kb_id = v_kb.id AND s.team_id = v_team.id) THEN
    RAISE EXCEPTION 'kb_already_shared: knowledge base "%" is already shared with team "%"', kb, team
      USING ERRCODE = 'KB012';
  END IF;
  INSERT INTO kb.kb_share (kb_id, team_id, permission, shared_by)
  VALUES (v_kb.id, v_team.id, 'read_only', acting_as);
END
$$;
COMMENT ON FUNCTION kb.share_knowledge_base(text, text, text, name) IS
  'Shares a team knowledge base read-only with another team (its creator or an owning-team '
  'admin). Errors: KB010 private_kb_cannot_be_shared, KB011 kb_shared_with_owning_team, '
  'KB012 kb_already_shared.';

CREATE OR REPLACE FUNCTION kb.unshare_knowledge_base(kb text, team text,
                                                     acting_as name DEFAULT current_user)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb   kb.knowledge_base;
  v_team kb.team;
BEGIN
  v_kb := kb._kb_acted_on(kb, acting_as, 'unshare');
  v_team := kb._get_team(team);
  DELETE FROM kb.kb_share s WHERE s.kb_id = v_kb.id AND s.team_id = v_team.id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'knowledge base "%" is not shared with team "%"', kb, team
      USING ERRCODE = 'no_data_found';
  END IF;
END
$$;
COMMENT ON FUNCTION kb.unshare_knowledge_base(text, text, name) IS
  'Ends a read-only share (its creator or an owning-team admin).';

CREATE OR REPLACE FUNCTION kb.knowledge_base_shares(kb text, acting_as name DEFAULT current_user)
RETURNS TABLE (team text, permission text, shared_by name, shared_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base;
BEGIN
  v_kb := kb._kb_acted_on(kb, acting_as);
  IF NOT kb._can_write_as(v_kb.id, acting_as) THEN
    RAISE EXCEPTION 'the shares of knowledge base "%" are shown to its own team only', kb
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN QUERY
  SELECT t.name, s.permission, s.shared_by, s.shared_at
  FROM kb.kb_share s JOIN kb.team t ON t.id = s.team_id
  WHERE s.kb_id = v_kb.id ORDER BY t.name;
END
$$;
COMMENT ON FUNCTION kb.knowledge_base_shares(text, name) IS
  'The teams a knowledge base is shared with (for members of its own team).';

-- --- the LLM call cache ------------------------------------------------------------------
-- kb.llm_call is the owner's: answers are read by exact request key (whoever knows the whole
-- request already knows everything the answer was made from) and written only by roles that
-- see all rows (the indexing worker), so no team can plant answers for another.
CREATE OR REPLACE FUNCTION kb._llm_cache_get(keys text[])
RETURNS TABLE (key text, response text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT c.key, c.response FROM kb.llm_call c WHERE c.key = ANY (keys) $$;
COMMENT ON FUNCTION kb._llm_cache_get(text[]) IS
  'Internal: cached LLM answers by exact request key.';
