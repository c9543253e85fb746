"""The library API: ``Client`` (psycopg, sync) and ``AsyncClient`` (asyncpg), same methods.

Both are thin: every method is one call of a ``kb.*`` SQL function, with database errors
turned into :mod:`kbpg.errors` classes that name what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbpg.errors import ConfigError, from_db
from kbpg.loaders import LoadedDocument, load_file

SEARCH_OPTIONS = (
    "top_k",
    "method",
    "filter",
    "vector_weight",
    "rrf_k",
    "fusion_depth",
    "similarity_threshold",
    "rerank",
    "candidate_count",
    "rerank_threshold",
    "k1",
    "b",
    "ef_search",
    "options",
)
CONTEXT_OPTIONS = (
    "token_budget",
    "max_chunks_per_document",
    "relevance_threshold",
    "expand_sections",
    "top_k",
    "method",
    "rerank",
    "filter",
    "options",
)
JSON_OPTIONS = ("filter", "options")


@dataclass
class SearchResult:
    rank: int
    chunk_id: int
    document_id: int
    title: str
    content: str
    score: float
    heading_path: list[str]
    page: int | None
    metadata: dict[str, Any]
    source_uri: str | None
    char_start: int
    char_end: int
    vector_score: float | None
    bm25_score: float | None
    rerank_score: float | None
    note: str | None

    @property
    def source(self) -> str:
        where = " > ".join(self.heading_path)
        text = self.title + (f" › {where}" if where else "")
        return text + (f" (p.{self.page})" if self.page else "")


@dataclass
class PutResult:
    document_id: int
    action: str  # added | replaced | unchanged
    title: str


def _named_call(
    function: str,
    fixed: dict[str, Any],
    options: dict[str, Any],
    allowed: tuple[str, ...],
    json_text: bool = True,
) -> tuple[str, list[Any]]:
    """``kb.fn(a => $1, b => $2, ...)`` with only known option names (never user text).

    JSON options go as text for psycopg; asyncpg's jsonb codec takes the objects
    (``json_text=False``).
    """
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(
            f"unknown option(s) for {function}: {', '.join(unknown)}",
            hint="known: " + ", ".join(allowed),
        )
    names: list[str] = []
    values: list[Any] = []
    for name, value in [*fixed.items(), *options.items()]:
        if value is None:
            continue
        if name in JSON_OPTIONS and json_text:
            value = json.dumps(value)
        names.append(name)
        values.append(value)
    args = ", ".join(
        f"{n} => ${i}" + ("::jsonb" if n in JSON_OPTIONS else "")
        for i, n in enumerate(names, start=1)
    )
    return f"SELECT * FROM kb.{function}({args})", values


def _psycopg_sql(query: str, params: list[Any] | tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    """``$n`` placeholders (asyncpg style, shared by both clients) to psycopg's ``%(pn)s``."""
    import re

    return (
        re.sub(r"\$(\d+)", r"%(p\1)s", query.replace("%", "%%")),
        {f"p{i}": v for i, v in enumerate(params, start=1)},
    )


def _document_args(doc: LoadedDocument, kb: str) -> list[Any]:
    return [
        kb,
        doc.title,
        doc.content,
        json.dumps(doc.metadata),
        doc.source_uri,
        doc.usage_mode,
        doc.page_starts,
    ]


DOCUMENT_STATUS_SQL = (
    "SELECT * FROM kb.document_status WHERE kb = $1 AND ($2::text IS NULL OR title = $2) "
    "ORDER BY document_id"
)
PUT_SQL = (
    "SELECT document_id, action FROM kb.put_document($1, $2, $3, $4::jsonb, $5, $6, $7::integer[])"
)


class Client:
    """Synchronous client over one psycopg connection (autocommit)."""

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

        try:
            with self.conn.cursor(row_factory=dict_row) as cur:
                cur.execute(*_psycopg_sql(query, params))
                return list(cur.fetchall()) if cur.description else []
        except psycopg.Error as exc:
            raise from_db(exc) from exc

    # --- knowledge bases ------------------------------------------------------------------
    def create_knowledge_base(
        self,
        name: str,
        indexing_config: dict[str, Any] | None = None,
        retrieval_config: dict[str, Any] | None = None,
        description: str = "",
    ) -> int:
        rows = self._rows(
            "SELECT kb.create_knowledge_base($1, $2::jsonb, $3::jsonb, $4) AS id",
            [
                name,
                json.dumps(indexing_config or {}),
                json.dumps(retrieval_config or {}),
                description,
            ],
        )
        return int(rows[0]["id"])

    def drop_knowledge_base(self, name: str, if_exists: bool = False) -> bool:
        rows = self._rows("SELECT kb.drop_knowledge_base($1, $2) AS ok", [name, if_exists])
        return bool(rows[0]["ok"])

    def list_knowledge_bases(self) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM kb.list_knowledge_bases()")

    def knowledge_base(self, name: str) -> dict[str, Any]:
        rows = self._rows("SELECT row_to_json(k)::jsonb AS kb FROM kb._get_kb($1) k", [name])
        return dict(rows[0]["kb"])

    # --- documents --------------------------------------------------------------------------
    def add_text(
        self,
        kb: str,
        title: str,
        content: str,
        metadata: dict[str, Any] | None = None,
        source_uri: str | None = None,
        usage_mode: str = "rag",
        page_starts: list[int] | None = None,
    ) -> PutResult:
        doc = LoadedDocument(title, content, metadata or {}, source_uri, page_starts, usage_mode)
        return self.put(kb, doc)

    def put(self, kb: str, doc: LoadedDocument) -> PutResult:
        row = self._rows(PUT_SQL, _document_args(doc, kb))[0]
        return PutResult(int(row["document_id"]), row["action"], doc.title)

    def add_file(
        self,
        kb: str,
        path: str | Path,
        metadata: dict[str, Any] | None = None,
        usage_mode: str = "rag",
        title: str | None = None,
    ) -> PutResult:
        doc = load_file(Path(path), metadata=metadata, usage_mode=usage_mode, title=title)
        return self.put(kb, doc)

    def delete_document(self, kb: str, title: str) -> bool:
        return bool(
            self._rows("SELECT kb.delete_document($1, $2::text) AS ok", [kb, title])[0]["ok"]
        )

    def reindex_document(self, kb: str, title: str) -> int:
        return int(self._rows("SELECT kb.reindex_document($1, $2) AS id", [kb, title])[0]["id"])

    def reindex_knowledge_base(self, kb: str, indexing_config: dict[str, Any] | None = None) -> int:
        cfg = json.dumps(indexing_config) if indexing_config is not None else None
        return int(
            self._rows("SELECT kb.reindex_knowledge_base($1, $2::jsonb) AS id", [kb, cfg])[0]["id"]
        )

    def document_status(self, kb: str, title: str | None = None) -> list[dict[str, Any]]:
        return self._rows(DOCUMENT_STATUS_SQL, [kb, title])

    def queue_status(self) -> list[dict[str, Any]]:
        return self._rows("SELECT * FROM kb.queue_status()")

    # --- retrieval --------------------------------------------------------------------------
    def search(self, kb: str, query: str, **options: Any) -> list[SearchResult]:
        sql, params = _named_call("search", {"kb": kb, "query": query}, options, SEARCH_OPTIONS)
        return [SearchResult(**row) for row in self._rows(sql, params)]

    def explain_search(self, kb: str, query: str, **options: Any) -> list[dict[str, Any]]:
        sql, params = _named_call(
            "explain_search", {"kb": kb, "query": query}, options, SEARCH_OPTIONS
        )
        return self._rows(sql, params)

    def build_context(self, kb: str, query: str, **options: Any) -> dict[str, Any]:
        sql, params = _named_call(
            "build_context", {"kb": kb, "query": query}, options, CONTEXT_OPTIONS
        )
        return self._rows(sql, params)[0]


class AsyncClient:
    """The same API over asyncpg. Create with ``await AsyncClient.connect(dsn)``."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    async def connect(cls, dsn: str | None = None) -> AsyncClient:
        import asyncpg

        from kbpg.db import resolve_dsn

        conn = await asyncpg.connect(_asyncpg_dsn(resolve_dsn(dsn)))
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
        try:
            records = await self.conn.fetch(query, *params)
        except asyncpg.PostgresError as exc:
            raise from_db(exc) from exc
        return [dict(r) for r in records]

    async def create_knowledge_base(
        self,
        name: str,
        indexing_config: dict[str, Any] | None = None,
        retrieval_config: dict[str, Any] | None = None,
        description: str = "",
    ) -> int:
        rows = await self._rows(
            "SELECT kb.create_knowledge_base($1, $2::jsonb, $3::jsonb, $4) AS id",
            [name, indexing_config or {}, retrieval_config or {}, description],
        )
        return int(rows[0]["id"])

    async def drop_knowledge_base(self, name: str, if_exists: bool = False) -> bool:
        rows = await self._rows("SELECT kb.drop_knowledge_base($1, $2) AS ok", [name, if_exists])
        return bool(rows[0]["ok"])

    async def list_knowledge_bases(self) -> list[dict[str, Any]]:
        return await self._rows("SELECT * FROM kb.list_knowledge_bases()")

    async def add_text(
        self,
        kb: str,
        title: str,
        content: str,
        metadata: dict[str, Any] | None = None,
        source_uri: str | None = None,
        usage_mode: str = "rag",
        page_starts: list[int] | None = None,
    ) -> PutResult:
        doc = LoadedDocument(title, content, metadata or {}, source_uri, page_starts, usage_mode)
        return await self.put(kb, doc)

    async def put(self, kb: str, doc: LoadedDocument) -> PutResult:
        args = _document_args(doc, kb)
        args[3] = doc.metadata
        row = (await self._rows(PUT_SQL, args))[0]
        return PutResult(int(row["document_id"]), row["action"], doc.title)

    async def add_file(
        self,
        kb: str,
        path: str | Path,
        metadata: dict[str, Any] | None = None,
        usage_mode: str = "rag",
        title: str | None = None,
    ) -> PutResult:
        doc = load_file(Path(path), metadata=metadata, usage_mode=usage_mode, title=title)
        return await self.put(kb, doc)

    async def document_status(self, kb: str, title: str | None = None) -> list[dict[str, Any]]:
        return await self._rows(DOCUMENT_STATUS_SQL, [kb, title])

    async def search(self, kb: str, query: str, **options: Any) -> list[SearchResult]:
        sql, params = _named_call(
            "search", {"kb": kb, "query": query}, options, SEARCH_OPTIONS, json_text=False
        )
        return [SearchResult(**row) for row in await self._rows(sql, params)]

    async def build_context(self, kb: str, query: str, **options: Any) -> dict[str, Any]:
        sql, params = _named_call(
            "build_context", {"kb": kb, "query": query}, options, CONTEXT_OPTIONS, json_text=False
        )
        return (await self._rows(sql, params))[0]


def _asyncpg_dsn(dsn: str) -> str:
    """asyncpg takes URLs only: turn a libpq keyword string into one."""
    if not dsn or "://" in dsn:
        return dsn
    from urllib.parse import quote

    parts = dict(p.split("=", 1) for p in dsn.split())
    host = parts.pop("host", "")
    user = parts.pop("user", "")
    port = parts.pop("port", "")
    db = parts.pop("dbname", "")
    query = {"host": host} if host.startswith("/") else {}
    netloc = (quote(user) + "@" if user else "") + ("" if host.startswith("/") else host)
    netloc += f":{port}" if port and not host.startswith("/") else ""
    if host.startswith("/") and port:
        query["port"] = port
    qs = "&".join(f"{k}={quote(v)}" for k, v in {**query, **parts}.items())
    return f"postgresql://{netloc}/{quote(db)}" + (f"?{qs}" if qs else "")
