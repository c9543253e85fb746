-- PL/Python entry points, in pairs. kb._py_<name> is the Python: a few lines that make
-- sure the kbpg_db package is importable, import the module, pass plpy in, return.
-- kb.<name> (or kb._<name>) is what SQL calls: PL/pgSQL that runs the Python and ends with
-- the handler "reraise_expected" (a marker kbpg_db.sqlgen expands): an expected error (any
-- SQLSTATE but 38000) is raised again as PostgreSQL's own errors read, the message without
-- PL/Python's "plpy.Error: " prefix, DETAIL and HINT kept, no Python traceback in CONTEXT.
-- An unexpected Python exception (38000, external_routine_exception) passes unchanged,
-- traceback included.

-- Composite types used by the Python functions below. Recreated only when missing.
DO $$
BEGIN
  IF to_regtype('kb.chunk_payload') IS NULL THEN
    CREATE TYPE kb.chunk_payload AS (
      ordinal      integer,
      content      text,
      embed_text   text,
      token_count  integer,
      heading_path text[],
      page         integer,
      char_start   integer,
      char_end     integer,
      embedding    text,         -- pgvector's text form (migrations/019)
      embed_hash   text          -- md5 of the text the vector is of (migrations/032)
    );
  END IF;
  IF to_regtype('kb.build_result') IS NULL THEN
    CREATE TYPE kb.build_result AS (
      status    text,                -- done | more | error (retried) | failed (for good)
      chunks    kb.chunk_payload[],
      artifacts jsonb,
      tokens    bigint,
      cost_usd  double precision,
      progress  text,
      usage     jsonb,
      error     text,
      reused    integer            -- chunks whose vectors came from the document's last build
    );
  END IF;
  IF to_regtype('kb.prepared_query') IS NULL THEN
    CREATE TYPE kb.prepared_query AS (config jsonb, embedding real[], note text, usage jsonb);
  END IF;
  -- What PL/Python hands back: the embedding as an array literal. PL/Python converts a
  -- list for a real[] element by element through Python's str() (0.3 ms for 384
  -- floats); array_in reads the literal in C (0.04 ms).
  IF to_regtype('kb.prepared_query_text') IS NULL THEN
    CREATE TYPE kb.prepared_query_text AS (config jsonb, embedding text, note text, usage jsonb);
  END IF;
  IF to_regtype('kb.tree_hit') IS NULL THEN
    CREATE TYPE kb.tree_hit AS (
      chunk_id bigint, rank integer, node_id text, reasoning text, note text, phases jsonb,
      usage jsonb
    );
  END IF;
  IF to_regtype('kb.assembled_context') IS NULL THEN
    CREATE TYPE kb.assembled_context AS (
      context text, sources jsonb, tokens_used integer, has_relevant boolean, fallback text
    );
  END IF;
END
$$;

-- Placeholder settings (kb.*) are never listed in pg_settings, and any user may SET them
-- or ALTER ROLE ... SET them for itself: what the server's own configuration files say
-- is read here, as the schema's owner.
CREATE OR REPLACE FUNCTION kb._server_setting(p_name text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = kb, pg_catalog, pg_temp
AS $$
  SELECT f.setting FROM pg_file_settings f
  WHERE f.name = p_name AND p_name LIKE 'kb.%' AND f.applied AND f.error IS NULL
  ORDER BY f.seqno DESC LIMIT 1
$$;
COMMENT ON FUNCTION kb._server_setting(text) IS
  'Internal: a kb.* setting as the server''s configuration files (postgresql.conf, ALTER '
  'SYSTEM) apply it, whatever a session, role or database set; NULL where they do not.';

CREATE OR REPLACE FUNCTION kb.python_init() RETURNS void
LANGUAGE plpython3u
SET search_path = kb, pg_catalog, pg_temp
AS $$
import os, sys
# The release this SQL was installed from (kbpg migrate writes it in).
release = "/*@kbpg_version*/"
if GD.get("kbpg_ready") == release:
    return
loaded = sys.modules.get("kbpg_db")
if loaded is not None and getattr(loaded, "__version__", None) != release:
    # kbpg was upgraded while this session ran: the old release's modules are loaded in
    # it, and Python cannot unload them. A new session loads the new release's folder.
    plpy.error("kbpg was upgraded to %s while this session had %s loaded"
               % (release, getattr(loaded, "__version__", "another release")),
               detail="the loaded package is %s" % os.path.dirname(loaded.__file__ or "?"),
               hint="start a new session (reconnect): it loads the new release",
               sqlstate="KB003")
rows = plpy.execute("SELECT current_setting('kb.python_path', true) AS p, "
                    "current_setting('kb.onnx_threads', true) AS t, "
                    "current_setting('kb.embed_service', true) AS e, "
                    "kb._server_setting('kb.python_path') AS s")
# Code on this path runs as the server's OS user: only the server's own configuration
# may name it, never a session, role or database setting that any user can make.
if (rows[0]["p"] or None) != (rows[0]["s"] or None):
    plpy.error("kb.python_path is read only from the server's configuration "
               "(postgresql.conf or ALTER SYSTEM)",
               detail="this session has %r; the configuration files have %r"
                      % (rows[0]["p"], rows[0]["s"]),
               hint="RESET kb.python_path, or remove it from ALTER ROLE/DATABASE ... SET",
               sqlstate="KB002")
path = rows[0]["p"] or "/usr/local/lib/kbpg/python%d.%d" % sys.version_info[:2]
# Each folder on the path holds the dependencies, and kbpg_db itself in
# releases/<version>/ (one folder per release, so an upgrade never rewrites the files a
# running session imports from); a folder with kbpg_db directly in it (a source checkout)
# serves too.
for entry in reversed([p for p in path.split(":") if p]):
    for folder in (entry, os.path.join(entry, "releases", release)):
        if folder not in sys.path and os.path.isdir(folder):
            sys.path.insert(0, folder)
if rows[0]["t"]:
    os.environ["KBPG_ONNX_THREADS"] = rows[0]["t"]
if rows[0]["e"]:
    os.environ["KBPG_EMBED_SERVICE"] = rows[0]["e"]
try:
    import kbpg_db
except ImportError as exc:
    plpy.error("kbpg's PL/Python package is not importable: %s" % exc,
               detail="kb.python_path is %r (kbpg_db is looked for in releases/%s/ of each "
                      "folder, then in the folder)" % (path, release),
               hint="run `kbpg server-setup` as root on the database host (make setup does in a "
                    "checkout), or set kb.python_path to the folder holding kbpg_db",
               sqlstate="KB002")
# The version handshake: SQL from one release and Python from another must not mix.
row = plpy.execute("SELECT version FROM kb.version")
for name, version in (("schema", row[0]["version"] if row else release), ("SQL", release)):
    if version != kbpg_db.__version__:
        plpy.error("kbpg's %s is version %s but its PL/Python package is version %s"
                   % (name, version, kbpg_db.__version__),
                   detail="the package was loaded from %s" % os.path.dirname(kbpg_db.__file__),
                   hint="run `kbpg server-setup` on the database host and `kbpg install` from the "
                        "same kbpg release",
                   sqlstate="KB003")
GD["kbpg_ready"] = release
$$;
COMMENT ON FUNCTION kb.python_init() IS
  'Puts kbpg''s PL/Python packages on sys.path (setting kb.python_path, default '
  '/usr/local/lib/kbpg/pythonX.Y; kbpg_db from its releases/<version>/ folder); called by '
  'every PL/Python function of kb, once per session. A session that loaded another '
  'release''s package gets KB003 and must reconnect.';

CREATE OR REPLACE FUNCTION kb.server_cpu_count() RETURNS integer
LANGUAGE plpython3u STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
import os
return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
$$;
COMMENT ON FUNCTION kb.server_cpu_count() IS
  'The CPU cores a server process may run on: the worker sizes its connections and each '
  'one''s ONNX threads by it (the local model runs in the server, not in the worker).';

CREATE OR REPLACE FUNCTION kb.embedding_process() RETURNS jsonb
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.embedding_process(plpy)
$$;
COMMENT ON FUNCTION kb.embedding_process() IS
  'The server''s embedding process, which embeds queries of the default local model for '
  'every connection: whether this connection uses it (setting kb.embed_service), whether '
  'it runs, its pid, its private memory in MB, its socket and the last line of its log. '
  'The first search of the default model starts it.';

CREATE OR REPLACE FUNCTION kb._py_validate_config(kind text, config jsonb, strategy text) RETURNS jsonb
LANGUAGE plpython3u STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.validate_config(plpy, kind, config, strategy)
$$;
CREATE OR REPLACE FUNCTION kb.validate_config(kind text, config jsonb, strategy text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN kb._py_validate_config(kind, config, strategy);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb.validate_config(text, jsonb, text) IS
  'Validates an indexing_config or retrieval_config and returns it completed with defaults '
  '(a retrieval_config against the KB''s strategy when given); raises invalid_parameter_value '
  'naming each bad field.';

CREATE OR REPLACE FUNCTION kb._py_check_defaults(kind text, config jsonb) RETURNS jsonb
LANGUAGE plpython3u STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.check_defaults(plpy, kind, config)
$$;
CREATE OR REPLACE FUNCTION kb._check_defaults(kind text, config jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN kb._py_check_defaults(kind, config);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._check_defaults(text, jsonb) IS
  'Internal: validates project defaults for kb.set_default_config.';

CREATE OR REPLACE FUNCTION kb._py_complete_config(kind text, config jsonb, strategy text) RETURNS jsonb
LANGUAGE plpython3u STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.complete_config(plpy, kind, config, strategy)
$$;
CREATE OR REPLACE FUNCTION kb._complete_config(kind text, config jsonb, strategy text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN kb._py_complete_config(kind, config, strategy);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._complete_config(text, jsonb, text) IS
  'Internal: a config over the project defaults (kb.setting), validated and completed.';

CREATE OR REPLACE FUNCTION kb._py_preview_chunks(content text, indexing_config jsonb) RETURNS SETOF kb.chunk_payload
LANGUAGE plpython3u STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.preview_chunks(plpy, content, indexing_config)
$$;
CREATE OR REPLACE FUNCTION kb.preview_chunks(content text, indexing_config jsonb DEFAULT '{}')
RETURNS SETOF kb.chunk_payload
LANGUAGE plpgsql STABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN QUERY SELECT * FROM kb._py_preview_chunks(content, indexing_config);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb.preview_chunks(text, jsonb) IS
  'Shows how a text would be chunked with an indexing_config, storing nothing.';

CREATE OR REPLACE FUNCTION kb._py_build_document(title text, content text, indexing_config jsonb,
    page_starts integer[], metadata jsonb, file bytea, index_id bigint, kb_id integer,
    document_id bigint)
RETURNS kb.build_result
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.build_document(plpy, title, content, indexing_config, page_starts, metadata, file,
                             index_id, kb_id, document_id)
$$;
CREATE OR REPLACE FUNCTION kb._build_document(title text, content text, indexing_config jsonb,
    page_starts integer[], metadata jsonb, file bytea DEFAULT NULL, index_id bigint DEFAULT NULL,
    kb_id integer DEFAULT NULL, document_id bigint DEFAULT NULL)
RETURNS kb.build_result
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN kb._py_build_document(title, content, indexing_config, page_starts, metadata, file,
                               index_id, kb_id, document_id);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._build_document(text, text, jsonb, integer[], jsonb, bytea, bigint, integer,
    bigint) IS
  'Internal: one step of indexing a document with its strategy (chunks and vectors, or a '
  'tree; LLM answers cached as they come). A rebuild of a document in its generation '
  '(document_id) reuses the vectors of chunks whose embedded text it finds again.';

CREATE OR REPLACE FUNCTION kb._py_prefetch_embeddings(kb_id integer, job_ids bigint[],
                                                      worker text)
RETURNS integer
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.prefetch_embeddings(plpy, kb_id, job_ids, worker)
$$;

CREATE OR REPLACE FUNCTION kb._py_prepare_query(indexing_config jsonb, retrieval_config jsonb,
    overrides jsonb, query text, expansion_ready boolean) RETURNS kb.prepared_query_text
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.prepare_query(plpy, indexing_config, retrieval_config, overrides, query,
                            expansion_ready)
$$;
CREATE OR REPLACE FUNCTION kb._prepare_query(indexing_config jsonb, retrieval_config jsonb,
    overrides jsonb, query text, expansion_ready boolean DEFAULT true)
RETURNS kb.prepared_query
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v kb.prepared_query_text;
BEGIN
  v := kb._py_prepare_query(indexing_config, retrieval_config, overrides, query,
                            expansion_ready);
  RETURN ROW(v.config, v.embedding::real[], v.note, v.usage)::kb.prepared_query;
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._prepare_query(jsonb, jsonb, jsonb, text, boolean) IS
  'Internal: validates per-call retrieval options and embeds the query when needed '
  '(full_text: for its term expansion, unless expansion_ready is false: the generation''s '
  'words have no vectors yet).';

CREATE OR REPLACE FUNCTION kb.embed_query(kb_name text, query text) RETURNS real[]
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
DECLARE
  v_ix kb.kb_index;
BEGIN
  v_ix := kb._active_index(kb._get_kb(kb_name));
  RETURN (kb._prepare_query(v_ix.indexing_config, '{"method": "vector"}', '{}', query)).embedding;
END
$$;
COMMENT ON FUNCTION kb.embed_query(text, text) IS
  'Embeds a text with the knowledge base''s embedding model (as used for queries).';

CREATE OR REPLACE FUNCTION kb._py_rerank(retrieval_config jsonb, query text, documents text[],
    OUT scores double precision[], OUT usage jsonb)
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.rerank(plpy, retrieval_config, query, documents)
$$;
CREATE OR REPLACE FUNCTION kb._rerank(retrieval_config jsonb, query text, documents text[],
    OUT scores double precision[], OUT usage jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  SELECT r.scores, r.usage INTO scores, usage
  FROM kb._py_rerank(retrieval_config, query, documents) r;
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._rerank(jsonb, text, text[]) IS
  'Internal: one score per document for the query (a local ONNX cross-encoder, a provider''s '
  'rerank model, or a chat model''s listwise ranking) and what an LLM ranking cost.';

CREATE OR REPLACE FUNCTION kb._py_chunk_origins(source_meta jsonb, spans jsonb) RETURNS jsonb
LANGUAGE plpython3u IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.chunk_origins(source_meta, spans)
$$;
CREATE OR REPLACE FUNCTION kb._chunk_origins(source_meta jsonb, spans jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN kb._py_chunk_origins(source_meta, spans);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._chunk_origins(jsonb, jsonb) IS
  'Internal: each chunk''s regions on its pages ({"regions": [{"page", "bbox"}], "ocr": '
  '{"engine", "confidence"}}) by ordinal, from a document''s recorded regions and its '
  'chunks'' [ordinal, char_start, char_end].';

CREATE OR REPLACE FUNCTION kb._py_count_tokens(content text) RETURNS integer
LANGUAGE plpython3u IMMUTABLE STRICT
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.count_tokens(content)
$$;
CREATE OR REPLACE FUNCTION kb.count_tokens(content text)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN kb._py_count_tokens(content);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb.count_tokens(text) IS
  'Number of cl100k_base tokens in a text.';

CREATE OR REPLACE FUNCTION kb._py_assemble_context(rows jsonb, token_budget integer,
    max_per_document integer) RETURNS kb.assembled_context
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.assemble_context(plpy, rows, token_budget, max_per_document)
$$;
CREATE OR REPLACE FUNCTION kb._assemble_context(rows jsonb, token_budget integer,
    max_per_document integer)
RETURNS kb.assembled_context
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN kb._py_assemble_context(rows, token_budget, max_per_document);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._assemble_context(jsonb, integer, integer) IS
  'Internal: lays ranked rows out as cited context within a token budget.';

CREATE OR REPLACE FUNCTION kb._py_tree_search(kb_id integer, index_id bigint, query text,
    retrieval_config jsonb, indexing_config jsonb) RETURNS SETOF kb.tree_hit
LANGUAGE plpython3u VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")
from kbpg_db import sqlapi
return sqlapi.tree_search(plpy, kb_id, index_id, query, retrieval_config, indexing_config)
$$;
CREATE OR REPLACE FUNCTION kb._tree_search(kb_id integer, index_id bigint, query text,
    retrieval_config jsonb, indexing_config jsonb)
RETURNS SETOF kb.tree_hit
LANGUAGE plpgsql VOLATILE
SET search_path = kb, pg_catalog, pg_temp
AS $$
BEGIN
  RETURN QUERY SELECT * FROM kb._py_tree_search(kb_id, index_id, query, retrieval_config,
                                                indexing_config);
/*@reraise_expected*/
END
$$;
COMMENT ON FUNCTION kb._tree_search(integer, bigint, text, jsonb, jsonb) IS
  'Internal: PageIndex Tree Search (LLM over the ToCs); the first row carries the note, what '
  'each phase chose, and the LLM usage. Writes nothing.';
