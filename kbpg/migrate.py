"""Schema installation: run-once migrations, then the idempotent SQL files.

``migrations/NNN-*.sql`` run once each, in order, and are recorded in ``kb.migration``
with the sha256 of their body; an applied migration whose file has since changed is an
error naming the file. ``sql/NNN-*.sql`` (``CREATE OR REPLACE`` only) are re-applied on
every run. Everything happens in one transaction under an advisory lock, so two
concurrent ``kbpg migrate`` runs cannot interleave and a failure changes nothing. The
table locks the scripts need are taken before any of them runs (``tables_to_lock``).
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
                if done[script.name] != script.sha256:
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
            # Functions whose parameters are generated: an older parameter list goes first,
            # or the new one would stand beside it as an ambiguous overload.
            for oid, args in conn.execute(
                "SELECT p.oid::regprocedure::text, p.proargnames[3:p.pronargs] FROM pg_proc p "
                "WHERE p.pronamespace = to_regnamespace('kb') "
                "AND p.proname IN ('search', 'explain_search')"
            ).fetchall():
                if list(args or []) != list(sqlgen.search_options()):
                    conn.execute(f"DROP FUNCTION {oid}")
            for script in scripts(sql_dir()):
                conn.execute(sqlgen.expand(script.body).replace(SEARCH_PATH, pinned))
                applied.append(script.name)
            # The version handshake: PL/Python refuses to run a package of another version.
            if conn.execute("SELECT to_regclass('kb.version')").fetchone()[0]:
                conn.execute(
                    "INSERT INTO kb.version (version) VALUES (%s) ON CONFLICT (id) "
                    "DO UPDATE SET version = EXCLUDED.version, installed_at = now()",
                    (__version__,),
                )
    return applied


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
