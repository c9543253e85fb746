"""The library API: ``Client`` (psycopg, sync) and ``AsyncClient`` (asyncpg), same methods.

Both are thin: every method is one call of a ``kb.*`` SQL function, with database errors
turned into :mod:`kbpg.errors` classes that name what is wrong.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbpg_db import sqlgen

from kbpg.errors import ConfigError, from_db
from kbpg.loaders import LoadedDocument, load_file

# kb.search's named parameters, generated from the retrieval model (kbpg_db.sqlgen).
SEARCH_OPTIONS = sqlgen.search_options()
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
    usage: dict[str, Any] | None = None  # what the query cost: embedding, rerank, LLM
    expanded_from: int | None = None  # GraphIndex: the hit (chunk_id) that references this

    @property
    def source(self) -> str:
        """The citation label, as kb.build_context writes it."""
        from kbpg_db.context import source_label

        return source_label(self.title, self.heading_path, self.page)


@dataclass
class PutResult:
    document_id: int
    action: str  # added | replaced | unchanged
    title: str


def _named_call(
    function: str, fixed: dict[str, Any], options: dict[str, Any], allowed: tuple[str, ...]
) -> tuple[str, list[Any]]:
    """``kb.fn(a => $1, b => $2, ...)`` with only known option names (never user text)."""
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
        names.append(name)
        values.append(Json(value) if name in JSON_OPTIONS else value)
    args = ", ".join(
        f"{n} => ${i}" + ("::jsonb" if n in JSON_OPTIONS else "")
        for i, n in enumerate(names, start=1)
    )
    return f"SELECT * FROM kb.{function}({args})", values


@dataclass
class Json:
    """A jsonb parameter: each client encodes it as its driver wants."""

    value: Any


@dataclass
class Call:
    """One SQL call of the API and how to read its rows; both clients run the same ones."""

    sql: str
    params: list[Any]
    read: Callable[[list[dict[str, Any]]], Any] = lambda rows: rows


def _first(column: str, cast: Callable[[Any], Any] = lambda v: v) -> Callable[[Any], Any]:
    return lambda rows: cast(rows[0][column])


def _none(rows: list[dict[str, Any]]) -> None:
    return None


class _Api:
    """Every method of the client API, once: each returns the :class:`Call` to run."""

    @staticmethod
    def create_knowledge_base(
        name: str,
        indexing_config: dict[str, Any] | None = None,
        retrieval_config: dict[str, Any] | None = None,
        description: str = "",
        team: str | None = None,
        private: bool = False,
    ) -> Call:
        return Call(
            "SELECT kb.create_knowledge_base($1, $2::jsonb, $3::jsonb, $4, $5, $6) AS id",
            [
                name,
                Json(indexing_config or {}),
                Json(retrieval_config or {}),
                description,
                team,
                private,
            ],
            _first("id", int),
        )

    @staticmethod
    def drop_knowledge_base(name: str, if_exists: bool = False) -> Call:
        return Call(
            "SELECT kb.drop_knowledge_base($1, $2) AS ok", [name, if_exists], _first("ok", bool)
        )

    @staticmethod
    def list_knowledge_bases(
        include_shared: bool = True, own_only: bool = False, team: str | None = None
    ) -> Call:
        return Call(
            "SELECT * FROM kb.list_knowledge_bases($1, $2, $3)", [include_shared, own_only, team]
        )

    @staticmethod
    def create_team(name: str) -> Call:
        return Call("SELECT kb.create_team($1) AS id", [name], _first("id", int))

    @staticmethod
    def add_team_member(team: str, member: str, role: str = "member") -> Call:
        return Call("SELECT kb.add_team_member($1, $2, $3)", [team, member, role], _none)

    @staticmethod
    def remove_team_member(team: str, member: str) -> Call:
        return Call(
            "SELECT kb.remove_team_member($1, $2) AS ok", [team, member], _first("ok", bool)
        )

    @staticmethod
    def list_teams() -> Call:
        return Call("SELECT * FROM kb.list_teams()", [])

    @staticmethod
    def share_knowledge_base(kb: str, team: str) -> Call:
        return Call("SELECT kb.share_knowledge_base($1, $2)", [kb, team], _none)

    @staticmethod
    def unshare_knowledge_base(kb: str, team: str) -> Call:
        return Call("SELECT kb.unshare_knowledge_base($1, $2)", [kb, team], _none)

    @staticmethod
    def knowledge_base(name: str) -> Call:
        return Call(
            "SELECT row_to_json(k)::jsonb AS kb FROM kb._get_kb($1) k", [name], _first("kb", dict)
        )

    @staticmethod
    def set_default_config(kind: str, config: dict[str, Any]) -> Call:
        return Call(
            "SELECT kb.set_default_config($1, $2::jsonb) AS v", [kind, Json(config)], _first("v")
        )

    @staticmethod
    def add_text(
        kb: str,
        title: str,
        content: str,
        metadata: dict[str, Any] | None = None,
        source_uri: str | None = None,
        usage_mode: str = "rag",
        page_starts: list[int] | None = None,
    ) -> Call:
        doc = LoadedDocument(title, content, metadata or {}, source_uri, page_starts, usage_mode)
        return _Api.put(kb, doc)

    @staticmethod
    def put(kb: str, doc: LoadedDocument) -> Call:
        if doc.convert:  # Office, HTML, CSV, JSON...: the server's job converts the bytes
            return Call(
                "SELECT document_id, action FROM kb.add_file($1, $2, $3::bytea, $4, $5::jsonb, $6)",
                [kb, doc.file_name, doc.file, doc.title, Json(doc.metadata), doc.usage_mode],
                lambda rows: PutResult(int(rows[0]["document_id"]), rows[0]["action"], doc.title),
            )
        return Call(
            "SELECT document_id, action FROM kb.put_document($1, $2, $3, $4::jsonb, $5, $6, "
            "$7::integer[], $8::bytea, $9, $10::jsonb)",
            [
                kb,
                doc.title,
                doc.content,
                Json(doc.metadata),
                doc.source_uri,
                doc.usage_mode,
                doc.page_starts,
                doc.file,
                doc.file_name,
                Json(doc.regions) if doc.regions else None,
            ],
            lambda rows: PutResult(int(rows[0]["document_id"]), rows[0]["action"], doc.title),
        )

    @staticmethod
    def add_file(
        kb: str,
        path: str | Path,
        metadata: dict[str, Any] | None = None,
        usage_mode: str = "rag",
        title: str | None = None,
    ) -> Call:
        doc = load_file(Path(path), metadata=metadata, usage_mode=usage_mode, title=title)
        return _Api.put(kb, doc)

    @staticmethod
    def add_url(
        kb: str,
        url: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        usage_mode: str = "rag",
        render: bool = True,
    ) -> Call:
        return Call(
            "SELECT document_id, action FROM kb.add_url($1, $2, $3, $4::jsonb, $5, $6)",
            [kb, url, title, Json(metadata or {}), usage_mode, render],
            lambda rows: PutResult(int(rows[0]["document_id"]), rows[0]["action"], title or url),
        )

    @staticmethod
    def media(kb: str, ref: str, document_id: int | None = None) -> Call:
        return Call(
            "SELECT * FROM kb.media($1, $2, $3::bigint)",
            [kb, ref, document_id],
            lambda rows: rows[0],
        )

    @staticmethod
    def delete_document(kb: str, title: str) -> Call:
        return Call(
            "SELECT kb.delete_document($1, $2::text) AS ok", [kb, title], _first("ok", bool)
        )

    @staticmethod
    def set_document_chunking(kb: str, title: str, chunking: dict[str, Any] | None) -> Call:
        return Call(
            "SELECT kb.set_document_chunking($1, $2, $3::jsonb) AS id",
            [kb, title, Json(chunking) if chunking is not None else None],
            _first("id", int),
        )

    @staticmethod
    def reindex_document(kb: str, title: str) -> Call:
        return Call("SELECT kb.reindex_document($1, $2) AS id", [kb, title], _first("id", int))

    @staticmethod
    def reindex_knowledge_base(kb: str, indexing_config: dict[str, Any] | None = None) -> Call:
        cfg = Json(indexing_config) if indexing_config is not None else None
        return Call(
            "SELECT kb.reindex_knowledge_base($1, $2::jsonb) AS id", [kb, cfg], _first("id", int)
        )

    @staticmethod
    def document_status(kb: str, title: str | None = None) -> Call:
        return Call(
            "SELECT * FROM kb.list_documents($1, $2)",
            [kb, title],
        )

    @staticmethod
    def queue_status() -> Call:
        return Call("SELECT * FROM kb.queue_status()", [])

    @staticmethod
    def search(kb: str, query: str, **options: Any) -> Call:
        sql, params = _named_call("search", {"kb": kb, "query": query}, options, SEARCH_OPTIONS)
        return Call(sql, params, lambda rows: [SearchResult(**row) for row in rows])

    @staticmethod
    def explain_search(kb: str, query: str, **options: Any) -> Call:
        sql, params = _named_call(
            "explain_search", {"kb": kb, "query": query}, options, SEARCH_OPTIONS
        )
        return Call(sql, params)

    @staticmethod
    def build_context(kb: str, query: str, **options: Any) -> Call:
        sql, params = _named_call(
            "build_context", {"kb": kb, "query": query}, options, CONTEXT_OPTIONS
        )
        return Call(sql, params, lambda rows: rows[0])


API = [name for name in vars(_Api) if not name.startswith("_")]


class Client:
    """Synchronous client over one psycopg connection (autocommit).

    Its methods are those of :class:`_Api` (knowledge bases, documents, retrieval); each
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

    def _run(self, call: Call) -> Any:
        return call.read(self._rows(call.sql, call.params))

    if TYPE_CHECKING:  # the API methods are attached below, from _Api

        def __getattr__(self, name: str) -> Any: ...


class AsyncClient:
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

    async def _run(self, call: Call) -> Any:
        return call.read(await self._rows(call.sql, call.params))

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


def _sync(name: str) -> Callable[..., Any]:
    build = getattr(_Api, name)

    @functools.wraps(build)
    def method(self: Client, *args: Any, **kwargs: Any) -> Any:
        return self._run(build(*args, **kwargs))

    return method


def _async(name: str) -> Callable[..., Any]:
    build = getattr(_Api, name)

    @functools.wraps(build)
    async def method(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        return await self._run(build(*args, **kwargs))

    return method


for _name in API:
    setattr(Client, _name, _sync(_name))
    setattr(AsyncClient, _name, _async(_name))


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
