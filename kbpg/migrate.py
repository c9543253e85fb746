"""Schema installation: run-once migrations, then the idempotent SQL files.

``migrations/NNN-*.sql`` run once each, in order, and are recorded in ``kb.migration``
with the sha256 of their body; an applied migration whose file has since changed is an
error naming the file (unless ``AMENDED`` lists the text it applied). ``sql/NNN-*.sql``
(``CREATE OR REPLACE`` only) are re-applied on every run, after the kb functions they no
longer define, or define with another result or parameter names, are dropped
(``drop_stale_functions``): a migration never has to drop an old signature. Everything
happens in one transaction under an advisory lock, so two concurrent ``kbpg migrate``
runs cannot interleave and a failure changes nothing. The table locks the scripts need
are taken before any of them runs (``tables_to_lock``).
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbpg_db import __version__, sqlgen

from kbpg.errors import InstallError, KbpgError
from kbpg.resources import migrations_dir, sql_dir

LOCK_KEY = 1801_0001
# Migrations corrected after they were published, with the sha256 of each earlier text a
# database may have applied. An earlier text either ran to the same result or failed
# (rolling the whole install back), so a database that applied it is up to date.
AMENDED: dict[str, frozenset[str]] = {
    # The three below switched a trigger off with ALTER TABLE, which fails on "pending
    # trigger events" when the same upgrade changed a knowledge_base row before them.
    "022-graph-index-references.sql": frozenset(
        {"1894071a094d24b4d60a92bb6bbf57d4e2a206dc4b941ae8ba3fe7689053055d"}
    ),
    "025-bm25-k1-by-method.sql": frozenset(
        {"a42a1c80ab417535cfdff30053dcc7bbfd2f42705f6f21c7d7a9c43a8b0ecc0e"}
    ),
    "029-term-expansion-by-model.sql": frozenset(
        {"7334cdd2908c91d53cc4d1f174ac1a51fe2b62a7c600e47536a1db3b9a611c95"}
    ),
}
SEARCH_PATH = "SET search_path = kb, pg_catalog, pg_temp"


@dataclass
class Script:
    name: str
    body: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body.encode()).hexdigest()


def scripts(folder: Path) -> list[Script]:
    return [Script(p.name, p.read_text()) for p in sorted(folder.glob("[0-9][0-9][0-9]-*.sql"))]


BOOTSTRAP = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS plpython3u;
CREATE SCHEMA IF NOT EXISTS kb;
CREATE TABLE IF NOT EXISTS kb.migration (
    name       text PRIMARY KEY,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE kb.migration IS 'Run-once migrations applied to this database (kbpg migrate).';
"""


def migrate(
    conn: Any,
    upto: str | None = None,
    *,
    with_sql: bool = True,
    migrations: list[Script] | None = None,
    attempts: int = 30,
) -> list[str]:
    """Bring the kb schema up to date on a psycopg connection. Returns what was applied.

    ``upto`` stops after the named migration (for upgrade tests). A live database is
    fine: each try waits at most ``lock_timeout`` (shorter than the server's deadlock
    check) for a table lock, so it is migrate that backs off and retries, never a
    search or a worker that gets cancelled as a deadlock victim.
    """
    import psycopg

    for attempt in range(1, attempts + 1):
        try:
            return _migrate_once(conn, upto, with_sql=with_sql, migrations=migrations)
        except psycopg.errors.LockNotAvailable:
            if attempt == attempts:
                raise
            time.sleep(min(0.2 * attempt, 3.0))
    raise AssertionError("unreachable")


# Table locks, weakest first; two different ones on a table combine into the next
# stronger one that conflicts with everything either does.
_MODES = ["ROW EXCLUSIVE", "SHARE", "SHARE ROW EXCLUSIVE", "ACCESS EXCLUSIVE"]


def _stronger(a: str | None, b: str) -> str:
    if a is None or a == b:
        return b
    return max(a, b, "SHARE ROW EXCLUSIVE", key=_MODES.index)


def tables_to_lock(body: str) -> dict[str, str]:
    """The existing-or-not kb tables a script's statements act on, each with the lock they
    take: ACCESS EXCLUSIVE to alter, rename, lock or attach a policy, SHARE to index, SHARE
    ROW EXCLUSIVE to replace a trigger or to be referenced by a new foreign key, ROW
    EXCLUSIVE to change rows; a view being replaced, ACCESS EXCLUSIVE. Tables only read
    are left out, and so are names inside a DO block or a function body: a migration
    that alters tables from one locks them itself first (as 013 does)."""
    import pglast
    from pglast import ast
    from pglast.visitors import Visitor

    locks: dict[str, str] = {}

    def add(rel: Any, mode: str) -> None:
        if rel is not None and rel.schemaname == "kb":
            name = f"kb.{rel.relname}"
            locks[name] = _stronger(locks.get(name), mode)

    class References(Visitor):  # type: ignore[misc]
        def visit_Constraint(self, _ancestors: Any, node: Any) -> None:
            add(node.pktable, "SHARE ROW EXCLUSIVE")

    for raw in pglast.parse_sql(body):
        stmt = raw.stmt
        if isinstance(stmt, ast.AlterTableStmt | ast.RenameStmt):
            add(stmt.relation, "ACCESS EXCLUSIVE")
        elif isinstance(stmt, ast.CreatePolicyStmt):
            add(stmt.table, "ACCESS EXCLUSIVE")
        elif isinstance(stmt, ast.LockStmt):
            for rel in stmt.relations or ():
                add(rel, "ACCESS EXCLUSIVE")
        elif isinstance(stmt, ast.ViewStmt):
            add(stmt.view, "ACCESS EXCLUSIVE")
        elif isinstance(stmt, ast.IndexStmt) and not stmt.concurrent:
            add(stmt.relation, "SHARE")
        elif isinstance(stmt, ast.CreateTrigStmt):
            add(stmt.relation, "SHARE ROW EXCLUSIVE")
        elif isinstance(stmt, ast.InsertStmt | ast.UpdateStmt | ast.DeleteStmt):
            add(stmt.relation, "ROW EXCLUSIVE")
        if isinstance(stmt, ast.AlterTableStmt | ast.CreateStmt):
            References()(stmt)
    return locks


def _lock_first(conn: Any, to_run: list[Script]) -> None:
    """Take every table lock the scripts about to run will need, before running any: a
    table that is busy fails this try at once (lock_timeout), not after minutes of work
    that would roll back, so a heavy migration on a live database cannot livelock."""
    locks: dict[str, str] = {}
    for script in to_run:
        for table, mode in tables_to_lock(sqlgen.expand(script.body)).items():
            locks[table] = _stronger(locks.get(table), mode)
    # Tables only: LOCK TABLE on a view would also lock every table it reads, in the
    # view's mode, where replacing the view locks just the view (briefly, at the end).
    tables = conn.execute(
        "SELECT t FROM unnest(%s::text[]) t JOIN pg_class c ON c.oid = to_regclass(t) "
        "WHERE c.relkind IN ('r', 'p') ORDER BY t",
        (sorted(locks),),
    ).fetchall()
    for (table,) in tables:
        conn.execute(f"LOCK TABLE {table} IN {locks[table]} MODE")


def _migrate_once(
    conn: Any,
    upto: str | None = None,
    *,
    with_sql: bool = True,
    migrations: list[Script] | None = None,
) -> list[str]:
    applied: list[str] = []
    migrations = scripts(migrations_dir()) if migrations is None else migrations
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute("SET LOCAL lock_timeout = '500ms'")
        conn.execute(BOOTSTRAP)
        done = dict(conn.execute("SELECT name, sha256 FROM kb.migration").fetchall())
        pending: list[Script] = []
        for script in migrations:
            if script.name not in done:
                pending.append(script)
            if upto and script.name == upto:
                break
        _lock_first(conn, [*pending, *(scripts(sql_dir()) if with_sql else [])])
        for script in migrations:
            if script.name in done:
                if done[script.name] not in {script.sha256, *AMENDED.get(script.name, ())}:
                    raise KbpgError(
                        f"migration {script.name} was changed after it was applied",
                        detail=f"applied sha256 {done[script.name]}, file sha256 {script.sha256}",
                        hint="released migrations are immutable: add a new migration instead",
                    )
            else:
                conn.execute(script.body)
                conn.execute(
                    "INSERT INTO kb.migration (name, sha256) VALUES (%s, %s)",
                    (script.name, script.sha256),
                )
                applied.append(script.name)
            if upto and script.name == upto:
                break
        if with_sql:
            # Functions pin their search_path; pgvector's types and operators live in
            # whatever schema the extension was created in, so that schema joins the path.
            row = conn.execute(
                "SELECT quote_ident(n.nspname) FROM pg_extension e "
                "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
            ).fetchone()
            pinned = (
                SEARCH_PATH.replace("kb, ", f"kb, {row[0]}, ") if row[0] != "kb" else SEARCH_PATH
            )
            bodies = [(s.name, sqlgen.expand(s.body)) for s in scripts(sql_dir())]
            # What the release no longer defines, or defines in a way CREATE OR REPLACE
            # cannot change in place, goes first: no hand-written DROP in a migration.
            applied += [
                f"drop {name}"
                for name in drop_stale_functions(
                    conn, [b for _, b in bodies], pinned.removeprefix("SET search_path = ")
                )
            ]
            for name, body in bodies:
                conn.execute(body.replace(SEARCH_PATH, pinned))
                applied.append(name)
            # The version handshake: PL/Python refuses to run a package of another version.
            if conn.execute("SELECT to_regclass('kb.version')").fetchone()[0]:
                conn.execute(
                    "INSERT INTO kb.version (version) VALUES (%s) ON CONFLICT (id) "
                    "DO UPDATE SET version = EXCLUDED.version, installed_at = now()",
                    (__version__,),
                )
    return applied


@dataclass(frozen=True)
class Routine:
    """A ``CREATE FUNCTION``/``CREATE PROCEDURE`` of the kb schema as ``sql/`` writes it:
    what PostgreSQL compares when CREATE OR REPLACE meets an existing routine of the same
    name and input types. Types are as written; :func:`drop_stale_functions` resolves them
    in the database."""

    name: str
    procedure: bool
    args: tuple[str, ...]  # input argument types
    arg_names: tuple[str, ...]
    defaults: int
    returns: str | None  # the declared return type (SETOF left out); None: none declared
    setof: bool
    columns: tuple[tuple[str, str], ...]  # OUT, INOUT and TABLE columns: (name, type)


def defined_routines(bodies: list[str]) -> list[Routine]:
    """Every routine of the kb schema that these SQL texts create (parsed with pglast)."""
    import pglast
    from pglast import ast
    from pglast.stream import RawStream

    def type_text(node: Any) -> str:
        text = str(RawStream()(node))
        return text.removeprefix("SETOF ")

    found = []
    for body in bodies:
        for raw in pglast.parse_sql(body):
            stmt = raw.stmt
            if not isinstance(stmt, ast.CreateFunctionStmt):
                continue
            names = [n.sval for n in stmt.funcname or ()]
            if len(names) != 2 or names[0] != "kb":
                continue
            args, arg_names, columns, defaults = [], [], [], 0
            for param in stmt.parameters or ():
                mode = str(param.mode.value if hasattr(param.mode, "value") else param.mode)
                if mode in ("i", "b", "v", "d"):
                    args.append(type_text(param.argType))
                    arg_names.append(param.name or "")
                    defaults += param.defexpr is not None
                if mode in ("o", "b", "t"):
                    columns.append((param.name or "", type_text(param.argType)))
            returns = stmt.returnType
            found.append(
                Routine(
                    name=f"kb.{names[1]}",
                    procedure=bool(stmt.is_procedure),
                    args=tuple(args),
                    arg_names=tuple(arg_names),
                    defaults=defaults,
                    returns=type_text(returns) if returns is not None else None,
                    setof=bool(returns is not None and returns.setof),
                    columns=tuple(columns),
                )
            )
    return found


# The kb schema's routines (an extension's own ones left out): input types, the names,
# defaults, result and OUT columns PostgreSQL checks when a routine is replaced.
_EXISTING_ROUTINES = """
SELECT format('kb.%I(%s)', p.proname, pg_get_function_identity_arguments(p.oid)),
       'kb.' || p.proname, p.prokind = 'p',
       ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[])
             WITH ORDINALITY AS a(t, n) ORDER BY n),
       ARRAY(SELECT format_type(t, NULL)
             FROM unnest(coalesce(p.proallargtypes, p.proargtypes::oid[]))
             WITH ORDINALITY AS a(t, n) ORDER BY n),
       coalesce(p.proargmodes::text[], array_fill('i'::text, ARRAY[p.pronargs])),
       coalesce(p.proargnames, '{}'), p.pronargdefaults,
       format_type(p.prorettype, NULL), p.proretset
FROM pg_proc p
WHERE p.pronamespace = 'kb'::regnamespace AND p.prokind IN ('f', 'p')
  -- a table source's trigger function, generated for it (kb._table_source_triggers)
  AND p.proname !~ '^_source_[0-9]+_[0-9]+_changed$'
  AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                  AND d.objid = p.oid AND d.deptype = 'e')
ORDER BY 1
"""


def drop_stale_functions(conn: Any, bodies: list[str], search_path: str) -> list[str]:
    """Drop every routine of the kb schema that the SQL texts about to run do not define,
    and every one they define in a way CREATE OR REPLACE refuses to change in place (its
    return type, OUT columns or input names changed, or defaults taken away): they are
    created afresh. Returns what was dropped. A routine that something still depends on
    (a policy, a trigger, a view) is an :class:`InstallError`: that needs a migration.

    ``search_path`` is the one the functions pin (pgvector's schema included): the types
    are resolved through it. A type the scripts have not created yet resolves to NULL:
    nothing existing has it."""
    defined = defined_routines(bodies)
    written = sorted(
        {t for r in defined for t in (*r.args, *(c for _, c in r.columns), r.returns or "")} - {""}
    )
    previous = conn.execute("SELECT current_setting('search_path')").fetchone()[0]
    conn.execute("SELECT set_config('search_path', %s, true)", (search_path,))
    canonical = dict(
        conn.execute(
            "SELECT t, format_type(to_regtype(t), NULL) FROM unnest(%s::text[]) t", (written,)
        ).fetchall()
    )
    dropped = _drop_unmatched(conn, defined, canonical, conn.execute(_EXISTING_ROUTINES))
    # (on an error the transaction rolls back, and the path with it)
    conn.execute("SELECT set_config('search_path', %s, true)", (previous,))
    return dropped


def _drop_unmatched(
    conn: Any, defined: list[Routine], canonical: dict[str, str | None], existing: Any
) -> list[str]:
    import psycopg

    def key(r: Routine) -> tuple[Any, ...] | None:
        args = tuple(canonical.get(t) for t in r.args)
        return None if None in args else (r.name, args)

    def result(r: Routine) -> tuple[str | None, bool]:
        """(return type, set-returning) as pg_proc records them."""
        if r.procedure:
            return ("record" if r.columns else "void"), False
        if r.returns is not None:
            return canonical.get(r.returns), r.setof
        return (canonical.get(r.columns[0][1]) if len(r.columns) == 1 else "record"), False

    wanted = {k: r for r in defined if (k := key(r)) is not None}
    dropped = []
    for (
        ident,
        name,
        procedure,
        arg_types,
        all_types,
        modes,
        names,
        ndefaults,
        rettype,
        retset,
    ) in existing.fetchall():
        r = wanted.get((name, tuple(arg_types)))
        if r is not None:
            in_names = tuple(
                (names[i] if i < len(names) else "")
                for i, m in enumerate(modes)
                if m in ("i", "b", "v")
            )
            columns = tuple(
                ((names[i] if i < len(names) else ""), all_types[i])
                for i, m in enumerate(modes)
                if m in ("o", "b", "t")
            )
            if (
                r.procedure == procedure
                and r.arg_names == in_names
                and r.defaults >= ndefaults
                and result(r) == (rettype, retset)
                and tuple((n, canonical.get(t)) for n, t in r.columns) == columns
            ):
                continue  # CREATE OR REPLACE changes it in place
        try:
            conn.execute(f"DROP ROUTINE {ident}")
        except psycopg.errors.DependentObjectsStillExist as exc:
            raise InstallError(
                f"{ident} must be dropped"
                + (
                    " (this release no longer defines it)"
                    if r is None
                    else " to be created afresh (its parameters or result changed)"
                )
                + ", but other objects depend on it",
                detail=exc.diag.message_detail,
                hint="add a migration that drops or changes the objects that use it",
            ) from None
        dropped.append(ident)
    return dropped


MIN_PGVECTOR = (0, 8)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def check_server(conn: Any) -> None:
    """What `kbpg install` needs of the server before it changes anything: a superuser
    (plpython3u is an untrusted language: only a superuser creates its functions), and
    the extensions plpython3u and vector >= 0.8 installed on the server. Each miss is an
    :class:`InstallError` that says what to install."""
    row = conn.execute(
        "SELECT r.rolsuper, current_user, current_setting('server_version') "
        "FROM pg_roles r WHERE r.rolname = current_user"
    ).fetchone()
    superuser, user, server_version = row
    if not superuser:
        raise InstallError(
            f"kbpg install must run as a superuser; {user} is not one",
            detail="it creates PL/Python (plpython3u) functions, and plpython3u is an untrusted "
            "language",
            hint="connect as a superuser (e.g. --dsn 'host=... user=postgres'); members and "
            "applications then use kbpg as ordinary roles (docs/security.md)",
        )
    found = dict(
        conn.execute(
            "SELECT name, coalesce(installed_version, default_version) "
            "FROM pg_available_extensions WHERE name IN ('vector', 'plpython3u')"
        ).fetchall()
    )
    major = server_version.split(".")[0].split(" ")[0]
    if "plpython3u" not in found:
        raise InstallError(
            f"the database server (PostgreSQL {server_version}) has no PL/Python (plpython3u)",
            hint=f"on its host: apt install postgresql-plpython3-{major}, or "
            'sudo "$(command -v kbpg)" server-setup --system-packages',
        )
    vector = found.get("vector")
    if vector is None or _version_tuple(vector) < MIN_PGVECTOR:
        raise InstallError(
            "the database server has "
            + (f"pgvector {vector}" if vector else "no pgvector")
            + f"; kbpg needs pgvector >= {'.'.join(map(str, MIN_PGVECTOR))}",
            detail="HNSW iterative scans (filtered vector search) came with pgvector 0.8",
            hint=f"on its host: a postgresql-{major}-pgvector package of 0.8 or later (Debian "
            "13's; Debian 12's is 0.4, too old: there, "
            'sudo "$(command -v kbpg)" server-setup --system-packages builds 0.8 from '
            "Debian 13's source package; or the PostgreSQL project's apt repository)",
        )


def check_python(conn: Any) -> None:
    """That the server's PL/Python loads kbpg's package of this release with the packages
    it imports: kb.python_init (the package and its version) and a chunking call
    (tiktoken, pydantic). A miss is an :class:`InstallError` naming the server's error."""
    import psycopg

    try:
        with conn.transaction():
            conn.execute("SELECT kb.python_init()")
            conn.execute("SELECT count(*) FROM kb.preview_chunks('# Check\n\nkbpg.', '{}')")
    except psycopg.Error as exc:
        diag = exc.diag
        raise InstallError(
            "the schema is installed, but the database server cannot run kbpg's PL/Python: "
            + (diag.message_primary or str(exc)),
            detail=diag.message_detail,
            hint="on the database host, as root: kbpg server-setup (the same kbpg release); "
            "then reconnect",
        ) from None
