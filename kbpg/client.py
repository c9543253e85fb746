"""The library API: ``Client`` (psycopg, sync) and ``AsyncClient`` (asyncpg), same methods.

Both are thin: every method is one call of a ``kb.*`` SQL function (built once, in
:mod:`kbpg.api`; typed in kbpg/_methods.py), with database errors turned into
:mod:`kbpg.errors` classes that name what is wrong.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from kbpg._methods import AsyncMethods, SyncMethods
from kbpg.api import API, Call, Json, PutResult, SearchResult
from kbpg.errors import from_db

__all__ = ["API", "AsyncClient", "Client", "PutResult", "SearchResult"]

T = TypeVar("T")


class Client(SyncMethods):
    """Synchronous client over one psycopg connection (autocommit).

    Its methods are those of :class:`kbpg.api.Api` (knowledge bases, documents, retrieval); each
    runs one ``kb.*`` SQL function and turns database errors into :mod:`kbpg.errors`.
    """

    def __init__(self, dsn: str | None = None, *, conn: Any = None) -> None:
        from kbpg.db import connect

        self.conn = conn if conn is not None else connect(dsn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, query: str, params: list[Any] | tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        import psycopg
        from psycopg.rows import dict_row
        from psycopg.types.json import Jsonb

        values = [Jsonb(p.value) if isinstance(p, Json) else p for p in params]
        try:  # a raw cursor takes the $n placeholders both clients share
            with psycopg.RawCursor(self.conn, row_factory=dict_row) as cur:
                cur.execute(query, values)
                return list(cur.fetchall()) if cur.description else []
        except psycopg.Error as exc:
            raise from_db(exc) from exc

    def _run(self, call: Call[T]) -> T:
        return call.read(self._rows(call.sql, call.params))


class AsyncClient(AsyncMethods):
    """The same API over asyncpg. Create with ``await AsyncClient.connect(dsn)``."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    async def connect(cls, dsn: str | None = None) -> AsyncClient:
        import asyncpg

        from kbpg.db import resolve_dsn

        conn = await asyncpg.connect(**_asyncpg_params(resolve_dsn(dsn)))
        await conn.set_type_codec(
            "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )
        return cls(conn)

    async def close(self) -> None:
        await self.conn.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _rows(
        self, query: str, params: list[Any] | tuple[Any, ...] = ()
    ) -> list[dict[str, Any]]:
        import asyncpg

        # Our codec encodes jsonb itself: hand it Python objects, not JSON text.
        values = [p.value if isinstance(p, Json) else p for p in params]
        try:
            records = await self.conn.fetch(query, *values)
        except asyncpg.PostgresError as exc:
            raise from_db(exc) from exc
        return [dict(r) for r in records]

    async def _run(self, call: Call[T]) -> T:
        return call.read(await self._rows(call.sql, call.params))


def _asyncpg_params(dsn: str) -> dict[str, Any]:
    """asyncpg's keyword arguments for a libpq connection string or URL (psycopg parses it,
    so every libpq form works)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn) if dsn else {}
    renames = {"dbname": "database", "sslmode": "ssl"}
    out: dict[str, Any] = {
        renames.get(k, k): v
        for k, v in params.items()
        if k in ("host", "port", "user", "password", "dbname", "sslmode")
    }
    if isinstance(out.get("port"), str) and out["port"].isdigit():
        out["port"] = int(out["port"])
    return out
