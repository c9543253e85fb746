"""Finding the database: ``--dsn``, ``KBPG_DSN``, the libpq variables, or the embedded cluster."""

from __future__ import annotations

import os
from typing import Any

from kbpg.errors import ClusterError

LIBPQ_VARS = ("PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


def resolve_dsn(dsn: str | None = None) -> str:
    """The connection string to use; the embedded cluster only when nothing else is given."""
    if dsn:
        return dsn
    if os.environ.get("KBPG_DSN"):
        return os.environ["KBPG_DSN"]
    if any(os.environ.get(v) for v in LIBPQ_VARS):
        return ""  # libpq reads PGHOST, PGPORT, ... itself
    from kbpg.cluster import Cluster

    cluster = Cluster.default()
    if not cluster.running():
        raise ClusterError(
            "no database given and the embedded cluster is not running",
            hint="run `kbpg up`, or pass --dsn / set KBPG_DSN or PGHOST/PGDATABASE",
        )
    return cluster.dsn()


def configure(conn: Any) -> None:
    """Per-connection setup (the pool's configure= callback too): pgvector's types as
    numpy arrays where the pgvector package is installed (kbpg[dev]); the client itself
    reads no vectors."""
    try:
        from pgvector.psycopg import register_vector
    except ImportError:
        return
    try:
        register_vector(conn)
    except Exception:  # the extension is not there yet (before the first migrate)
        conn.rollback() if not conn.autocommit else None


def connect(dsn: str | None = None, autocommit: bool = True) -> Any:
    """A psycopg connection; one that fails is a ConnectionFailed (a KbpgError) with
    libpq's message and a hint."""
    import psycopg

    from kbpg.errors import connection_error

    try:
        conn = psycopg.connect(resolve_dsn(dsn), autocommit=autocommit)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        raise connection_error(exc) from exc
    configure(conn)
    return conn


def scalar(conn: Any, query: str, params: Any = None) -> Any:
    """The first column of the first row of a query (None when there is no row)."""
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]
