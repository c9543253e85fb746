-- Knowledge-base lifecycle: create, drop, look up, settings; project defaults.

CREATE OR REPLACE FUNCTION kb._get_kb(kb_name text) RETURNS kb.knowledge_base
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v kb.knowledge_base;
BEGIN
  IF kb_name IS NULL THEN
    RAISE EXCEPTION 'knowledge base name must not be null' USING ERRCODE = 'null_value_not_allowed';
  END IF;
  SELECT * INTO v FROM kb.knowledge_base k WHERE k.name = kb_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'knowledge base "%" does not exist', kb_name
      USING ERRCODE = 'no_data_found', HINT = 'kb.list_knowledge_bases() lists them';
  END IF;
  RETURN v;
END
$$;
COMMENT ON FUNCTION kb._get_kb(text) IS 'Internal: the knowledge base row by name, or no_data_found.';

CREATE OR REPLACE FUNCTION kb._get_kb_by_id(p_kb_id integer) RETURNS kb.knowledge_base
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v kb.knowledge_base;
BEGIN
  SELECT * INTO v FROM kb.knowledge_base k WHERE k.id = p_kb_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'knowledge base with id % does not exist', p_kb_id
      USING ERRCODE = 'no_data_found', HINT = 'kb.list_knowledge_bases() lists them';
  END IF;
  RETURN v;
END
$$;
COMMENT ON FUNCTION kb._get_kb_by_id(integer) IS
  'Internal: the knowledge base row by id (as the caller may see it), or no_data_found.';

CREATE OR REPLACE FUNCTION kb._active_index(v_kb kb.knowledge_base) RETURNS kb.kb_index
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
-- PL/pgSQL: its plan is kept for the session (every search calls it).
DECLARE
  v kb.kb_index;
BEGIN
  SELECT * INTO v FROM kb.kb_index i WHERE i.id = v_kb.active_index_id AND i.kb_id = v_kb.id;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  RETURN v;
END
$$;

CREATE OR REPLACE FUNCTION kb._index_kb(p_index_id bigint) RETURNS integer
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT kb_id FROM kb.kb_index WHERE id = p_index_id $$;
COMMENT ON FUNCTION kb._index_kb(bigint) IS
  'Internal: the knowledge base an index generation belongs to (the kb_id its rows carry).';

CREATE OR REPLACE FUNCTION kb._vector_type(dim integer) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT CASE WHEN dim > 2000 THEN 'halfvec' ELSE 'vector' END $$;
COMMENT ON FUNCTION kb._vector_type(integer) IS
  'The pgvector type an index of this dimension uses: HNSW takes vector up to 2000 dimensions, '
  'halfvec up to 4000.';

CREATE OR REPLACE FUNCTION kb._config_dimensions(p_config jsonb) RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT (p_config->>'embedding_dimensions')::integer $$;
COMMENT ON FUNCTION kb._config_dimensions(jsonb) IS
  'Internal: vector size of a validated indexing_config (validation records it; the model '
  'catalogue lives in kbpg_db.config.KNOWN_MODELS only).';

CREATE OR REPLACE FUNCTION kb._check_text_search_config(p_name text) RETURNS regconfig
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN p_name::regconfig;
EXCEPTION
  WHEN undefined_object THEN
    RAISE EXCEPTION 'indexing_config.text_search_config: text search configuration "%" does not exist', p_name
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'SELECT cfgname FROM pg_ts_config lists them (english, simple, german, ...)';
END
$$;

CREATE OR REPLACE FUNCTION kb.create_knowledge_base(
    name text,
    indexing_config jsonb DEFAULT '{}',
    retrieval_config jsonb DEFAULT '{}',
    description text DEFAULT '',
    team text DEFAULT NULL,
    private boolean DEFAULT false
) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_icfg jsonb;
  v_rcfg jsonb;
  v_id   integer;
  v_ix   kb.kb_index;
  v_team integer;
BEGIN
  v_team := kb._team_for_new_kb(team);
  IF kb._blank(name) THEN
    RAISE EXCEPTION 'knowledge base name must not be empty' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF length(name) > 200 THEN
    RAISE EXCEPTION 'knowledge base name is % characters; the limit is 200', length(name)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF kb._kb_name_taken(name) THEN  -- across teams: names are unique in the database
    RAISE EXCEPTION 'knowledge base "%" already exists', name
      USING ERRCODE = 'unique_violation', HINT = 'pick another name or drop the existing one';
  END IF;
  v_icfg := kb._complete_config('indexing_config', indexing_config);
  v_rcfg := kb._complete_config('retrieval_config', retrieval_config, v_icfg->>'strategy');
  PERFORM kb._check_text_search_config(v_icfg->>'text_search_config');
  INSERT INTO kb.knowledge_base (name, description, indexing_config, retrieval_config,
                                 embedding_model, embedding_dim, team_id, visibility, created_by)
  VALUES (create_knowledge_base.name, coalesce(description, ''), v_icfg, v_rcfg,
          v_icfg->>'embedding_model', kb._config_dimensions(v_icfg), v_team,
          CASE WHEN private THEN 'private' ELSE 'team' END, current_user)
  RETURNING id INTO v_id;
  v_ix := kb._create_index(v_id, v_icfg);
  UPDATE kb.kb_index SET status = 'active', activated_at = now()
   WHERE kb_id = v_ix.kb_id AND id = v_ix.id;
  UPDATE kb.knowledge_base SET active_index_id = v_ix.id WHERE id = v_id;
  RETURN v_id;
END
$$;
COMMENT ON FUNCTION kb.create_knowledge_base(text, jsonb, jsonb, text, text, boolean) IS
  'Creates a knowledge base of a team (team => name; default: your only team) or, with '
  'private => true, one only you see. Its configs are laid over the project defaults '
  '(kb.set_default_config), validated and recorded complete, so later default changes never '
  'alter it. indexing_config.strategy picks the index strategy. Returns its id.';

CREATE OR REPLACE FUNCTION kb._team_for_new_kb(p_team text) RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ids   integer[];
  v_names text[];
BEGIN
  -- The owner and superusers (single-user installs, DBAs) create in "default" unless told.
  IF p_team IS NULL AND kb._sees_all(current_user) THEN
    RETURN (kb._get_team('default')).id;
  END IF;
  SELECT array_agg(t.id ORDER BY t.name), array_agg(t.name ORDER BY t.name)
    INTO v_ids, v_names
    FROM kb.team t JOIN kb.team_member m ON m.team_id = t.id AND m.member = current_user
   WHERE p_team IS NULL OR t.name = p_team;
  IF coalesce(array_length(v_ids, 1), 0) = 1 THEN
    RETURN v_ids[1];
  END IF;
  IF p_team IS NOT NULL THEN
    IF kb._sees_all(current_user) THEN
      RETURN (kb._get_team(p_team)).id;
    END IF;
    RAISE EXCEPTION 'role "%" is not a member of team "%"', current_user, p_team
      USING ERRCODE = 'insufficient_privilege', HINT = 'kb.list_teams() lists yours';
  END IF;
  IF v_ids IS NULL THEN
    RAISE EXCEPTION 'role "%" belongs to no team', current_user
      USING ERRCODE = 'insufficient_privilege',
            HINT = 'create one with kb.create_team(name), or ask a team admin to add you';
  END IF;
  RAISE EXCEPTION 'role "%" belongs to several teams (%); say which', current_user,
                  array_to_string(v_names, ', ')
    USING ERRCODE = 'invalid_parameter_value', HINT = 'name it with the team argument';
END
$$;
COMMENT ON FUNCTION kb._team_for_new_kb(text) IS
  'Internal: the team a new KB goes to: the one named (you must be in it), else your only '
  'team; for the owner and superusers, "default".';

CREATE OR REPLACE FUNCTION kb._kb_name_taken(p_name text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$ SELECT EXISTS (SELECT 1 FROM kb.knowledge_base k WHERE k.name = p_name) $$;
COMMENT ON FUNCTION kb._kb_name_taken(text) IS
  'Internal: knowledge base names are unique across teams; says whether one is taken (only '
  'that, for a name another team uses).';

CREATE OR REPLACE FUNCTION kb.drop_knowledge_base(name text, if_exists boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_kb kb.knowledge_base;
  v_id integer;
  v_ix bigint;
  v_src kb.source;
BEGIN
  SELECT * INTO v_kb FROM kb.knowledge_base k WHERE k.name = drop_knowledge_base.name;
  IF NOT FOUND THEN
    IF if_exists THEN RETURN false; END IF;
    PERFORM kb._get_kb(name);
  END IF;
  PERFORM kb._require_manage(v_kb, 'drop');
  SELECT id INTO v_id FROM kb.knowledge_base k WHERE k.id = v_kb.id FOR UPDATE;
  -- Generations first, each with everything built into it (no statistics upkeep for
  -- rows on their way out), then the KB with its documents. (The KB's active_index_id
  -- is checked at commit, when the KB is gone too.)
  FOR v_ix IN SELECT id FROM kb.kb_index WHERE kb_id = v_id LOOP
    PERFORM kb._drop_index(v_id, v_ix);
  END LOOP;
  -- Its table sources' triggers go from the applications' tables.
  FOR v_src IN SELECT * FROM kb.source s WHERE s.kb_id = v_id AND s.kind = 'table' LOOP
    DELETE FROM kb.source s WHERE s.kb_id = v_id AND s.id = v_src.id;
    PERFORM kb._detach_table_source(v_id, v_src.id, v_src.relation);
  END LOOP;
  DELETE FROM kb.knowledge_base WHERE id = v_id;
  RETURN true;
END
$$;
COMMENT ON FUNCTION kb.drop_knowledge_base(text, boolean) IS
  'Drops a knowledge base with its documents, chunks, vectors and jobs.';

CREATE OR REPLACE FUNCTION kb.set_retrieval_config(kb_name text, retrieval_config jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_cfg jsonb;
  v_kb  kb.knowledge_base;
BEGIN
  v_kb := kb._get_kb_for_write(kb_name);
  v_cfg := kb.validate_config('retrieval_config', retrieval_config, v_kb.indexing_config->>'strategy');
  UPDATE kb.knowledge_base SET retrieval_config = v_cfg, updated_at = now() WHERE name = kb_name;
  RETURN v_cfg;
END
$$;
COMMENT ON FUNCTION kb.set_retrieval_config(text, jsonb) IS
  'Replaces a KB''s retrieval_config (validated, completed with defaults).';

-- Direct writes by DBAs are validated too.
CREATE OR REPLACE FUNCTION kb._knowledge_base_check() RETURNS trigger
LANGUAGE plpgsql
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF NEW.retrieval_config IS DISTINCT FROM OLD.retrieval_config THEN
    NEW.retrieval_config := kb.validate_config('retrieval_config', NEW.retrieval_config,
                                               NEW.indexing_config->>'strategy');
  END IF;
  -- A KB's build settings are those of the generation serving it, and they change only
  -- with it: to a finished generation of this KB (kb._maybe_activate; kb._kb_index_guard
  -- keeps a generation from becoming active unfinished). A fact of the rows, not a
  -- switch a session could set.
  IF (NEW.indexing_config IS DISTINCT FROM OLD.indexing_config
      OR NEW.embedding_model IS DISTINCT FROM OLD.embedding_model
      OR NEW.embedding_dim IS DISTINCT FROM OLD.embedding_dim
      OR NEW.active_index_id IS DISTINCT FROM OLD.active_index_id)
     AND NOT EXISTS (SELECT 1 FROM kb.kb_index i
                      WHERE i.kb_id = NEW.id AND i.id = NEW.active_index_id
                        AND i.status = 'active' AND i.indexing_config = NEW.indexing_config
                        AND i.embedding_model = NEW.embedding_model
                        AND i.embedding_dim = NEW.embedding_dim) THEN
    RAISE EXCEPTION 'indexing_config, embedding_model, embedding_dim and active_index_id of "%" cannot be written directly', OLD.name
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'use kb.reindex_knowledge_base(kb, indexing_config => ...)';
  END IF;
  NEW.updated_at := now();
  RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER knowledge_base_check BEFORE UPDATE ON kb.knowledge_base
  FOR EACH ROW EXECUTE FUNCTION kb._knowledge_base_check();

CREATE OR REPLACE FUNCTION kb.list_knowledge_bases(include_shared boolean DEFAULT true,
                                                   own_only boolean DEFAULT false,
                                                   team text DEFAULT NULL)
RETURNS TABLE (name text, embedding_model text, embedding_dim integer, documents bigint,
               ready bigint, pending bigint, failed bigint, chunks bigint, created_at timestamptz,
               team text, visibility text, created_by name, access text)
LANGUAGE sql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
  WITH mine AS (
    SELECT m.team_id FROM kb.team_member m JOIN kb.team t ON t.id = m.team_id
     WHERE m.member = current_user AND (list_knowledge_bases.team IS NULL
                                        OR t.name = list_knowledge_bases.team)
  ), visible AS (
    SELECT k.*,
           CASE WHEN k.team_id IN (SELECT team_id FROM mine) OR k.created_by = current_user
                  OR (kb._sees_all(current_user) AND list_knowledge_bases.team IS NULL)
                THEN 'owner' ELSE 'shared' END AS access
    FROM kb.knowledge_base k
    WHERE (list_knowledge_bases.team IS NULL
           OR k.team_id IN (SELECT team_id FROM mine)
           OR k.id IN (SELECT s.kb_id FROM kb.kb_share s
                        WHERE s.team_id IN (SELECT team_id FROM mine)))
  )
  SELECT k.name, k.embedding_model, k.embedding_dim,
         count(d.id), count(d.id) FILTER (WHERE d.status = 'ready'),
         count(d.id) FILTER (WHERE d.status IN ('pending', 'indexing')),
         count(d.id) FILTER (WHERE d.status = 'error'),
         coalesce((SELECT i.n_chunks FROM kb.kb_index i
                    WHERE i.kb_id = k.id AND i.id = k.active_index_id), 0),
         k.created_at, kb._team_name(k.team_id), k.visibility, k.created_by,
         CASE WHEN k.access = 'owner' THEN 'read_write' ELSE 'read_only' END
  FROM visible k LEFT JOIN kb.document d ON d.kb_id = k.id
  WHERE k.access = 'owner' OR (include_shared AND NOT own_only)
  GROUP BY k.id, k.name, k.embedding_model, k.embedding_dim, k.created_at, k.team_id,
           k.visibility, k.created_by, k.access, k.active_index_id
  ORDER BY k.name
$$;
COMMENT ON FUNCTION kb.list_knowledge_bases(boolean, boolean, text) IS
  'The knowledge bases you can read, with model, document counts per status, team, '
  'visibility and access (read_write for your teams'' and your private ones, read_only for '
  'those shared with your team). include_shared => false or own_only => true lists your '
  'team''s own only; team => limits to one of your teams.';

CREATE OR REPLACE FUNCTION kb.set_default_config(kind text, config jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF kind IS NULL OR kind NOT IN ('indexing_config', 'retrieval_config') THEN
    RAISE EXCEPTION 'unknown config kind "%" (expected indexing_config or retrieval_config)',
                    coalesce(kind, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF config IS NULL OR jsonb_typeof(config) <> 'object' THEN
    RAISE EXCEPTION '% defaults must be a JSON object', kind USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- The defaults alone must make a valid config (and so must each KB created over them).
  PERFORM kb._check_defaults(kind, config);
  INSERT INTO kb.setting (name, value) VALUES (kind, config)
  ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = now();
  RETURN config;
END
$$;
COMMENT ON FUNCTION kb.set_default_config(text, jsonb) IS
  'Sets the project-wide defaults for indexing_config or retrieval_config: the fields given '
  'apply to knowledge bases created afterwards unless their own config sets them (extra '
  'merges key by key). Existing KBs keep the config they recorded. ''{}'' clears them.';

CREATE OR REPLACE FUNCTION kb.default_config(kind text) RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  IF kind IS NULL OR kind NOT IN ('indexing_config', 'retrieval_config') THEN
    RAISE EXCEPTION 'unknown config kind "%" (expected indexing_config or retrieval_config)',
                    coalesce(kind, 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN coalesce((SELECT value FROM kb.setting WHERE name = kind), '{}');
END
$$;
COMMENT ON FUNCTION kb.default_config(text) IS
  'The project-wide defaults set for indexing_config or retrieval_config (''{}'' when none).';

CREATE OR REPLACE FUNCTION kb.purge_llm_cache(older_than interval DEFAULT NULL, model text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_n bigint;
BEGIN
  IF older_than < interval '0' THEN
    RAISE EXCEPTION 'older_than must not be negative (got %)', older_than
      USING ERRCODE = 'invalid_parameter_value',
            HINT = 'e.g. interval ''30 days''; NULL purges every cached answer';
  END IF;
  DELETE FROM kb.llm_call c
   WHERE (older_than IS NULL OR c.last_used_at < now() - older_than)
     AND (purge_llm_cache.model IS NULL OR c.model = purge_llm_cache.model);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END
$$;
COMMENT ON FUNCTION kb.purge_llm_cache(interval, text) IS
  'Deletes cached LLM answers (all, or those unused for older_than, or of one model); '
  'returns how many. The next index build asks those questions again.';
