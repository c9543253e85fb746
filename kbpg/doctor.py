"""`kbpg doctor` and `kbpg uninstall`: what a DBA checks, and how kbpg leaves a database.

Each doctor check is a :class:`Finding`: ok, a warning, or a problem, with what to do
about it. The command exits 1 when any finding is a problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OK, WARNING, PROBLEM = "ok", "warning", "problem"


@dataclass
class Finding:
    level: str
    check: str
    what: str
    todo: str | None = None


def _one(conn: Any, sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def diagnose(conn: Any) -> list[Finding]:
    """Every check, in the order a DBA would go through them."""
    from kbpg_db import __version__

    from kbpg.migrate import MIN_PGVECTOR, _version_tuple

    out: list[Finding] = []
    version = _one(conn, "SELECT current_setting('server_version')")
    major = int(_one(conn, "SELECT current_setting('server_version_num')::int / 10000"))
    out.append(
        Finding(
            OK if major >= 15 else PROBLEM,
            "server",
            f"PostgreSQL {version}",
            None if major >= 15 else "kbpg needs PostgreSQL 15 or later",
        )
    )
    exts = dict(
        conn.execute(
            "SELECT a.name, coalesce(e.extversion, '') FROM pg_available_extensions a "
            "LEFT JOIN pg_extension e ON e.extname = a.name "
            "WHERE a.name IN ('vector', 'plpython3u')"
        ).fetchall()
    )
    if "plpython3u" not in exts:
        out.append(
            Finding(
                PROBLEM,
                "plpython3u",
                "not available on the server",
                f"apt install postgresql-plpython3-{major} on its host",
            )
        )
    else:
        out.append(
            Finding(OK, "plpython3u", "available" + (", installed" if exts["plpython3u"] else ""))
        )
    vector = exts.get("vector")
    if vector is None:
        out.append(
            Finding(
                PROBLEM,
                "pgvector",
                "not available on the server",
                'sudo "$(command -v kbpg)" server-setup --system-packages',
            )
        )
    elif vector and _version_tuple(vector) < MIN_PGVECTOR:
        out.append(
            Finding(
                PROBLEM,
                "pgvector",
                f"{vector} installed; kbpg needs 0.8 or later",
                "ALTER EXTENSION vector UPDATE (after installing 0.8 on the host)",
            )
        )
    else:
        out.append(Finding(OK, "pgvector", vector or "available"))
    if not _one(conn, "SELECT to_regclass('kb.version') IS NOT NULL"):
        out.append(
            Finding(
                PROBLEM,
                "schema",
                "kbpg is not installed in this database",
                "kbpg --dsn ... install (as a superuser)",
            )
        )
        return out
    installed = _one(conn, "SELECT version FROM kb.version")
    out.append(
        Finding(
            OK if installed == __version__ else WARNING,
            "schema",
            f"release {installed} installed; this client is {__version__}",
            None
            if installed == __version__
            else "kbpg --dsn ... install with this client "
            "upgrades it (and kbpg server-setup the server's package)",
        )
    )
    path = _one(conn, "SELECT current_setting('kb.python_path', true)")
    out.append(Finding(OK, "kb.python_path", path or "unset (/usr/local/lib/kbpg/pythonX.Y)"))
    import psycopg

    try:
        with conn.transaction():
            conn.execute("SELECT kb.python_init()")
            conn.execute("SELECT kb.count_tokens('kbpg')")
        out.append(Finding(OK, "PL/Python", f"loads kbpg's package {installed}"))
        out.append(_embedding_process(conn))
    except psycopg.Error as exc:
        message = " ".join((exc.diag.message_primary or str(exc)).split())
        out.append(
            Finding(
                PROBLEM,
                "PL/Python",
                f"cannot run kbpg's package: {message}",
                'on the database host: sudo "$(command -v kbpg)" server-setup, then reconnect',
            )
        )
    missing = conn.execute(
        "SELECT k.name, i.id, (c.oid IS NOT NULL) AS present, coalesce(x.indisvalid, false) "
        "FROM kb.knowledge_base k JOIN kb.kb_index i ON i.kb_id = k.id "
        "AND i.status IN ('active', 'building') "
        "LEFT JOIN pg_class c ON c.relname = 'embedding_hnsw_' || i.id "
        "AND c.relnamespace = 'kb'::regnamespace "
        "LEFT JOIN pg_index x ON x.indexrelid = c.oid "
        "WHERE NOT (c.oid IS NOT NULL AND coalesce(x.indisvalid, false)) ORDER BY k.name"
    ).fetchall()
    generations = _one(
        conn, "SELECT count(*) FROM kb.kb_index WHERE status IN ('active', 'building')"
    )
    if missing:
        names = ", ".join(
            f"{kb} (generation {ix}: {'invalid' if present else 'missing'})"
            for kb, ix, present, _ in missing
        )
        out.append(
            Finding(
                PROBLEM,
                "HNSW indexes",
                f"not usable: {names}",
                "kbpg kb reindex NAME rebuilds the generation (searches keep serving the old one)",
            )
        )
    else:
        out.append(Finding(OK, "HNSW indexes", f"{generations} generation(s), each index valid"))
    expired, failed, queued, oldest = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'running' AND locked_until < clock_timestamp()), "
        "count(*) FILTER (WHERE status = 'failed'), "
        "count(*) FILTER (WHERE status = 'queued'), "
        "extract(epoch FROM clock_timestamp() - min(created_at) FILTER (WHERE status = 'queued'))"
        " FROM kb.job"
    ).fetchone()
    workers = _one(
        conn,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'kbpg-worker' "
        "AND datname = current_database()",
    )
    if expired:
        out.append(
            Finding(
                WARNING,
                "queue",
                f"{expired} running job(s) whose lease ran out",
                "their worker stopped: another worker takes them over (kbpg worker)",
            )
        )
    if failed:
        out.append(
            Finding(
                WARNING,
                "queue",
                f"{failed} job(s) failed for good",
                "kbpg status shows their errors; fix the cause, then "
                "SELECT kb.reindex_document(kb, title)",
            )
        )
    if queued and not workers:
        out.append(
            Finding(
                PROBLEM,
                "queue",
                f"{queued} job(s) queued (the oldest {oldest / 60:.0f} min) and no "
                "worker connected",
                "start one: kbpg --dsn ... worker",
            )
        )
    if not (expired or failed or (queued and not workers)):
        out.append(Finding(OK, "queue", f"{queued} queued, {workers} worker connection(s)"))
    return out


def _embedding_process(conn: Any) -> Finding:
    """The server's embedding process for queries (docs/operations.md)."""
    proc = _one(conn, "SELECT kb.embedding_process()")
    if not proc["enabled"]:
        return Finding(
            OK,
            "embedding process",
            "off for this connection (kb.embed_service = off): queries load the model in "
            "each backend",
        )
    if proc["running"]:
        return Finding(
            OK,
            "embedding process",
            f"running (pid {proc['pid']}, {proc['private_mb']} MB of its own): queries of "
            "the default model are embedded there, once per server",
        )
    last = f"; its log's last line: {proc['last_log']}" if proc.get("last_log") else ""
    return Finding(
        OK,
        "embedding process",
        "not running: the next search of the default model starts it" + last,
    )


def print_findings(findings: list[Finding]) -> int:
    marks = {OK: "ok     ", WARNING: "warning", PROBLEM: "PROBLEM"}
    for f in findings:
        print(f"{marks[f.level]}  {f.check:15s} {f.what}")
        if f.todo:
            print(f"{'':26s}-> {f.todo}")
    problems = sum(f.level == PROBLEM for f in findings)
    print(f"\n{problems} problem(s), {sum(f.level == WARNING for f in findings)} warning(s)")
    return 1 if problems else 0


def uninstall(conn: Any) -> list[str]:
    """Drop the kb schema with everything in it; what is left, for the user to decide."""
    from kbpg.errors import StateError

    if not _one(conn, "SELECT to_regnamespace('kb') IS NOT NULL"):
        raise StateError("kbpg is not installed in this database (no kb schema)")
    with conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '5s'")
        conn.execute("DROP SCHEMA kb CASCADE")
    left = []
    for ext in ("vector", "plpython3u"):
        if _one(conn, "SELECT 1 FROM pg_extension WHERE extname = %s", (ext,)):
            users = _one(
                conn,
                "SELECT count(*) FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid "
                "WHERE e.extname = %s AND d.deptype = 'n'",
                (ext,),
            )
            left.append(
                f"extension {ext} ({users} other object(s) use it"
                + ("" if users else f"; DROP EXTENSION {ext} removes it")
                + ")"
            )
    settings = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM pg_settings WHERE name LIKE 'kb.%%' AND source <> 'default'"
        ).fetchall()
    ]
    if settings:
        left.append("settings " + ", ".join(settings) + " (postgresql.conf or ALTER SYSTEM RESET)")
    left.append(
        "on the database host, the PL/Python packages in /usr/local/lib/kbpg (rm -r it when no "
        "other database uses kbpg)"
    )
    return left
