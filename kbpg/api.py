"""The client API, once: :class:`Api` builds each method's SQL call; the typed methods
of :class:`~kbpg.client.Client` and :class:`~kbpg.client.AsyncClient` (kbpg/_methods.py)
are generated from it (``make client-methods``), so both clients
have the same methods, and an editor completes them and their options.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from kbpg_db import sqlgen

from kbpg.errors import ConfigError
from kbpg.loaders import LoadedDocument, load_file

T = TypeVar("T")

# kb.search's named parameters, generated from the retrieval model (kbpg_db.sqlgen).
SEARCH_OPTIONS = sqlgen.search_options()
# kb.build_context's options, with their Python types.
CONTEXT_OPTION_TYPES = {
    "token_budget": "int",
    "max_chunks_per_document": "int",
    "relevance_threshold": "float",
    "expand_sections": "bool",
    "top_k": "int",
    "method": "str",
    "rerank": "bool",
    "filter": "dict[str, Any]",
    "options": "dict[str, Any]",
}
CONTEXT_OPTIONS = tuple(CONTEXT_OPTION_TYPES)
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


Rows = list[dict[str, Any]]


def _rows(rows: Rows) -> Rows:
    return rows


@dataclass
class Call(Generic[T]):
    """One SQL call of the API and how to read its rows; both clients run the same ones."""

    sql: str
    params: list[Any]
    read: Callable[[Rows], T]


def _first(column: str, cast: Callable[[Any], Any] = lambda v: v) -> Callable[[Any], Any]:
    return lambda rows: cast(rows[0][column])


def _none(rows: list[dict[str, Any]]) -> None:
    return None


class Api:
    """Every method of the client API, once: each returns the :class:`Call` to run."""

    @staticmethod
    def create_knowledge_base(
        name: str,
        indexing_config: dict[str, Any] | None = None,
        retrieval_config: dict[str, Any] | None = None,
        description: str = "",
        team: str | None = None,
        private: bool = False,
    ) -> Call[int]:
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
    def drop_knowledge_base(name: str, if_exists: bool = False) -> Call[bool]:
        return Call(
            "SELECT kb.drop_knowledge_base($1, $2) AS ok", [name, if_exists], _first("ok", bool)
        )

    @staticmethod
    def list_knowledge_bases(
        include_shared: bool = True, own_only: bool = False, team: str | None = None
    ) -> Call[Rows]:
        return Call(
            "SELECT * FROM kb.list_knowledge_bases($1, $2, $3)",
            [include_shared, own_only, team],
            _rows,
        )

    @staticmethod
    def create_team(name: str) -> Call[int]:
        return Call("SELECT kb.create_team($1) AS id", [name], _first("id", int))

    @staticmethod
    def add_team_member(team: str, member: str, role: str = "member") -> Call[None]:
        return Call("SELECT kb.add_team_member($1, $2, $3)", [team, member, role], _none)

    @staticmethod
    def remove_team_member(team: str, member: str) -> Call[bool]:
        return Call(
            "SELECT kb.remove_team_member($1, $2) AS ok", [team, member], _first("ok", bool)
        )

    @staticmethod
    def list_teams() -> Call[Rows]:
        return Call("SELECT * FROM kb.list_teams()", [], _rows)

    @staticmethod
    def share_knowledge_base(kb: str, team: str) -> Call[None]:
        return Call("SELECT kb.share_knowledge_base($1, $2)", [kb, team], _none)

    @staticmethod
    def unshare_knowledge_base(kb: str, team: str) -> Call[None]:
        return Call("SELECT kb.unshare_knowledge_base($1, $2)", [kb, team], _none)

    @staticmethod
    def knowledge_base(name: str) -> Call[dict[str, Any]]:
        return Call(
            "SELECT row_to_json(k)::jsonb AS kb FROM kb._get_kb($1) k", [name], _first("kb", dict)
        )

    @staticmethod
    def set_default_config(kind: str, config: dict[str, Any]) -> Call[dict[str, Any]]:
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
    ) -> Call[PutResult]:
        doc = LoadedDocument(title, content, metadata or {}, source_uri, page_starts, usage_mode)
        return Api.put(kb, doc)

    @staticmethod
    def put(kb: str, doc: LoadedDocument) -> Call[PutResult]:
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
    ) -> Call[PutResult]:
        doc = load_file(Path(path), metadata=metadata, usage_mode=usage_mode, title=title)
        return Api.put(kb, doc)

    @staticmethod
    def add_url(
        kb: str,
        url: str,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        usage_mode: str = "rag",
        render: bool = True,
    ) -> Call[PutResult]:
        return Call(
            "SELECT document_id, action FROM kb.add_url($1, $2, $3, $4::jsonb, $5, $6)",
            [kb, url, title, Json(metadata or {}), usage_mode, render],
            lambda rows: PutResult(int(rows[0]["document_id"]), rows[0]["action"], title or url),
        )

    @staticmethod
    def media(kb: str, ref: str, document_id: int | None = None) -> Call[dict[str, Any]]:
        return Call(
            "SELECT * FROM kb.media($1, $2, $3::bigint)",
            [kb, ref, document_id],
            lambda rows: rows[0],
        )

    @staticmethod
    def delete_document(kb: str, title: str) -> Call[bool]:
        return Call(
            "SELECT kb.delete_document($1, $2::text) AS ok", [kb, title], _first("ok", bool)
        )

    @staticmethod
    def set_document_chunking(kb: str, title: str, chunking: dict[str, Any] | None) -> Call[int]:
        return Call(
            "SELECT kb.set_document_chunking($1, $2, $3::jsonb) AS id",
            [kb, title, Json(chunking) if chunking is not None else None],
            _first("id", int),
        )

    @staticmethod
    def reindex_document(kb: str, title: str) -> Call[int]:
        return Call("SELECT kb.reindex_document($1, $2) AS id", [kb, title], _first("id", int))

    @staticmethod
    def reindex_knowledge_base(kb: str, indexing_config: dict[str, Any] | None = None) -> Call[int]:
        cfg = Json(indexing_config) if indexing_config is not None else None
        return Call(
            "SELECT kb.reindex_knowledge_base($1, $2::jsonb) AS id", [kb, cfg], _first("id", int)
        )

    @staticmethod
    def document_status(kb: str, title: str | None = None) -> Call[Rows]:
        return Call(
            "SELECT * FROM kb.list_documents($1, $2)",
            [kb, title],
            _rows,
        )

    @staticmethod
    def delete_document_by_id(kb: str, document_id: int) -> Call[bool]:
        return Call(
            "SELECT kb.delete_document($1, $2::bigint) AS ok", [kb, document_id], _first("ok", bool)
        )

    # -- sources (kbpg sync)
    @staticmethod
    def add_source(kb: str, name: str, locator: str, kind: str = "folder") -> Call[int]:
        return Call(
            "SELECT kb.add_source($1, $2, $3, $4) AS id",
            [kb, name, locator, kind],
            _first("id", int),
        )

    @staticmethod
    def add_table_source(
        kb: str,
        table: str,
        key_column: str,
        text_columns: list[str] | None = None,
        text_expression: str | None = None,
        title_column: str | None = None,
        metadata_columns: list[str] | None = None,
        filter: str | None = None,
        name: str | None = None,
    ) -> Call[int]:
        return Call(
            "SELECT kb.add_table_source($1, $2::regclass, $3, $4::text[], $5, $6, "
            "coalesce($7::text[], '{}'), $8, $9) AS id",
            [
                kb,
                table,
                key_column,
                text_columns,
                text_expression,
                title_column,
                metadata_columns,
                filter,
                name,
            ],
            _first("id", int),
        )

    @staticmethod
    def add_url_source(
        kb: str,
        name: str,
        urls: list[str],
        refresh_interval: str = "1 day",
        render: bool = True,
        metadata: dict[str, Any] | None = None,
    ) -> Call[int]:
        return Call(
            "SELECT kb.add_url_source($1, $2, $3::text[], $4::interval, $5, "
            "coalesce($6::jsonb, '{}')) AS id",
            [kb, name, urls, refresh_interval, render, Json(metadata) if metadata else None],
            _first("id", int),
        )

    @staticmethod
    def drop_source(kb: str, name: str, delete_documents: bool = False) -> Call[int]:
        return Call(
            "SELECT kb.drop_source($1, $2, $3) AS n", [kb, name, delete_documents], _first("n", int)
        )

    @staticmethod
    def sources(kb: str | None = None) -> Call[Rows]:
        return Call(
            "SELECT * FROM kb.sources WHERE $1::text IS NULL OR kb = $1 ORDER BY kb, source",
            [kb],
            _rows,
        )

    @staticmethod
    def sync_plan(kb: str, source: str, files: list[dict[str, str]]) -> Call[Rows]:
        return Call(
            "SELECT * FROM kb.sync_plan($1, $2, $3::jsonb)", [kb, source, Json(files)], _rows
        )

    @staticmethod
    def bind_document(kb: str, source: str, document_id: int, key: str, hash: str) -> Call[None]:
        return Call(
            "SELECT kb.bind_document($1, $2, $3, $4, $5)",
            [kb, source, document_id, key, hash],
            lambda _rows: None,
        )

    @staticmethod
    def move_document(
        kb: str,
        document_id: int,
        title: str,
        metadata: dict[str, Any] | None = None,
        source_key: str | None = None,
    ) -> Call[int]:
        return Call(
            "SELECT kb.move_document($1, $2, $3, $4::jsonb, $5) AS id",
            [kb, document_id, title, Json(metadata) if metadata is not None else None, source_key],
            _first("id", int),
        )

    @staticmethod
    def finish_sync(
        kb: str, source: str, summary: dict[str, Any], error: str | None = None
    ) -> Call[None]:
        return Call(
            "SELECT kb.finish_sync($1, $2, $3::jsonb, $4)",
            [kb, source, Json(summary), error],
            lambda _rows: None,
        )

    @staticmethod
    def retry_failed(kb: str, title: str | None = None) -> Call[int]:
        return Call("SELECT kb.retry_failed($1, $2) AS n", [kb, title], _first("n", int))

    @staticmethod
    def queue_status() -> Call[Rows]:
        return Call("SELECT * FROM kb.queue_status()", [], _rows)

    @staticmethod
    def search(kb: str, query: str, **options: Any) -> Call[list[SearchResult]]:
        sql, params = _named_call("search", {"kb": kb, "query": query}, options, SEARCH_OPTIONS)
        return Call(sql, params, lambda rows: [SearchResult(**row) for row in rows])

    @staticmethod
    def explain_search(kb: str, query: str, **options: Any) -> Call[Rows]:
        sql, params = _named_call(
            "explain_search", {"kb": kb, "query": query}, options, SEARCH_OPTIONS
        )
        return Call(sql, params, _rows)

    @staticmethod
    def build_context(kb: str, query: str, **options: Any) -> Call[dict[str, Any]]:
        sql, params = _named_call(
            "build_context", {"kb": kb, "query": query}, options, CONTEXT_OPTIONS
        )
        return Call(sql, params, lambda rows: rows[0])


API = [name for name in vars(Api) if not name.startswith("_")]


# ------------------------------------------------------------- the generated methods

_PY_TYPES = {
    "text": "str",
    "integer": "int",
    "double precision": "float",
    "boolean": "bool",
    "jsonb": "dict[str, Any]",
}


def option_types(method: str) -> dict[str, str]:
    """The keyword options a method takes in place of ``**options``, with their types."""
    if method == "build_context":
        return CONTEXT_OPTION_TYPES
    types = {name: _PY_TYPES[sql_type] for name, _, sql_type in sqlgen.retrieval_parameters()}
    return {**types, "options": "dict[str, Any]"}


def _method(name: str, asynchronous: bool) -> list[str]:
    signature = inspect.signature(getattr(Api, name))
    returns = str(signature.return_annotation)
    assert returns.startswith("Call[") and returns.endswith("]"), (name, returns)
    params, args = ["self"], []
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            params.append("*")
            for option, typ in option_types(name).items():
                params.append(f"{option}: {typ} | None = None")
                args.append(f"{option}={option}")
            continue
        default = "" if p.default is p.empty else f" = {p.default!r}"
        params.append(f"{p.name}: {p.annotation}{default}")
        args.append(p.name)
    run = "await self._run" if asynchronous else "self._run"
    return [
        f"    {'async ' if asynchronous else ''}def {name}({', '.join(params)}) -> "
        f"{returns[5:-1]}:",
        f"        return {run}(Api.{name}({', '.join(args)}))",
        "",
    ]


def generate_methods() -> str:
    """kbpg/_methods.py: each API method, typed, for the sync and the async client."""
    lines = [
        '"""The typed methods of Client and AsyncClient. Generated from kbpg.api.Api by',
        "``make client-methods``: do not edit.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from pathlib import Path",
        "from typing import Any, TypeVar",
        "",
        "from kbpg.api import Api, Call, PutResult, Rows, SearchResult",
        "from kbpg.loaders import LoadedDocument",
        "",
        'T = TypeVar("T")',
        "",
    ]
    for cls, asynchronous in (("SyncMethods", False), ("AsyncMethods", True)):
        lines += [
            "",
            f"class {cls}:",
            f'    """Every API method; :class:`kbpg.client.{"AsyncClient" if asynchronous else "Client"}`'
            ' runs them."""',
            "",
            f"    {'async ' if asynchronous else ''}def _run(self, call: Call[T]) -> T:",
            "        raise NotImplementedError",
            "",
        ]
        for name in API:
            lines += _method(name, asynchronous)
    return "\n".join(lines).rstrip() + "\n"
