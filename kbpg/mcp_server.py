"""`kbpg mcp`: knowledge bases as tools for agents, over the Model Context Protocol.

Tools: the knowledge bases the caller may read, search one, build cited context, read a
document or a section, walk a PageIndex tree (its table of contents, then a node) and an
entity's neighbours in a knowledge graph. Every call runs as a database role, so
row-level security decides what it sees: over stdio the role the connection string names;
over streamable HTTP the role a client's bearer token maps to (``--tokens FILE``, a JSON
object ``{"token": "role"}``), set with ``SET ROLE`` on a connection of its own (the
server's role must be a member of each such role). A request without a known token gets
HTTP 401 and reaches no tool.

Requires the ``mcp`` extra (``pip install 'kbpg[mcp]'``), the official Python SDK;
``kbpg mcp`` says so where it is missing.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import anyio
from kbpg_db import __version__
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from kbpg.errors import ConfigError, KbpgError

log = logging.getLogger("kbpg.mcp")

# What a tool returns at most, so an agent's context is not flooded by one call.
MAX_TOP_K = 50
MAX_TEXT_CHARS = 20_000
MAX_CONTEXT_TOKENS = 20_000


def load_tokens(path: str | Path) -> dict[str, str]:
    """The token -> role map of ``path``: a JSON object of non-empty strings."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"the tokens file {path} cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise ConfigError(f"the tokens file {path} is not JSON ({exc})") from None
    if (
        not isinstance(data, dict)
        or not data
        or not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in data.items())
    ):
        raise ConfigError(
            f"the tokens file {path} must be a JSON object of tokens to role names",
            hint='{"a-long-random-token": "app_reader", "another-token": "analyst"}',
        )
    short = [role for token, role in data.items() if len(token) < 16]
    if short:
        raise ConfigError(
            f"the tokens file {path} has a token under 16 characters (role {short[0]})",
            hint="use long random tokens: python3 -c 'import secrets; print(secrets.token_urlsafe())'",
        )
    return data


class Sessions:
    """One database connection per role, each used by one call at a time."""

    def __init__(self, dsn: str | None) -> None:
        self.dsn = dsn
        self._conns: dict[str | None, Any] = {}
        self._locks: dict[str | None, threading.Lock] = {}
        self._guard = threading.Lock()

    def _conn(self, role: str | None) -> Any:
        from psycopg import sql

        from kbpg.db import connect

        conn = self._conns.get(role)
        if conn is None or conn.closed or conn.broken:
            conn = connect(self.dsn)
            if role is not None:
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
            self._conns[role] = conn
        return conn

    def run(self, role: str | None, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Rows of ``query`` as ``role`` (None: the connection's own role)."""
        import psycopg
        from psycopg.rows import dict_row

        from kbpg.errors import from_db

        with self._guard:
            lock = self._locks.setdefault(role, threading.Lock())
        with lock:
            conn = self._conn(role)
            try:
                with conn.cursor(row_factory=dict_row) as cur:
                    cur.execute(query, params)
                    return list(cur.fetchall()) if cur.description else []
            except psycopg.Error as exc:
                raise from_db(exc) from exc

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


def _clip(text: str | None, limit: int = MAX_TEXT_CHARS) -> str:
    text = text or ""
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"\n[... {len(text) - limit} more characters]"
    )


def build_server(dsn: str | None, tokens: dict[str, str] | None = None) -> MCPServer:
    """The MCP server (the SDK's MCPServer) with kbpg's tools."""
    sessions = Sessions(dsn)
    server = MCPServer(
        name="kbpg",
        version=__version__,
        instructions="Knowledge bases inside PostgreSQL: list them, search one, build cited "
        "context for a question, and read documents, sections and graph neighbours. Every "
        "answer carries the ids a later call can read in full.",
    )

    def role_of(ctx: Context) -> str | None:
        headers = ctx.headers
        if headers is None or tokens is None:
            return None  # stdio: the connection's own role
        scheme, _, token = (headers.get("authorization") or "").partition(" ")
        role = tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if role is None:  # the HTTP app refuses these before any tool; kept as a guard
            raise ToolError("no valid bearer token")
        return role

    async def rows(ctx: Context, sql_text: str, **params: Any) -> list[dict[str, Any]]:
        role = role_of(ctx)
        try:
            return await anyio.to_thread.run_sync(sessions.run, role, sql_text, params)
        except KbpgError as exc:
            raise ToolError(str(exc)) from None

    def need(value: str, what: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ToolError(f"{what} must not be empty")
        return value

    def bounded(value: int, what: str, low: int, high: int) -> int:
        if not low <= value <= high:
            raise ToolError(f"{what} must be between {low} and {high}, not {value}")
        return value

    def question(
        kb: str, query: str, method: str | None, filter: dict[str, Any] | None
    ) -> dict[str, Any]:
        """search's and build_context's shared parameters, checked."""
        return {
            "kb": need(kb, "kb"),
            "query": need(query, "query"),
            "method": method,
            "filter": json.dumps(filter) if filter is not None else None,
        }

    @server.tool()
    async def list_knowledge_bases(ctx: Context) -> list[dict[str, Any]]:
        """The knowledge bases you may read: name, documents ready, chunks, team, access."""
        found = await rows(
            ctx,
            "SELECT name, documents, ready, chunks, team, visibility, access "
            "FROM kb.list_knowledge_bases() ORDER BY name",
        )
        return [{k: (int(v) if k in ("documents", "ready", "chunks") else v) for k, v in r.items()}
                for r in found]  # fmt: skip

    @server.tool()
    async def search(
        ctx: Context,
        kb: str,
        query: str,
        method: str | None = None,
        top_k: int = 5,
        filter: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Search a knowledge base. method: hybrid (default), vector or full_text; filter:
        metadata the documents must contain. Each hit has its chunk_id and document_id
        (read_document reads the whole document), title, heading path, page and score."""
        params = question(kb, query, method, filter)
        found = await rows(
            ctx,
            "SELECT rank, chunk_id, document_id, title, heading_path, page, score, content, "
            "source_uri, metadata FROM kb.search(%(kb)s, %(query)s, top_k => %(top_k)s, "
            "method => %(method)s, filter => %(filter)s::jsonb)",
            top_k=bounded(top_k, "top_k", 1, MAX_TOP_K),
            **params,
        )
        out = []
        for r in found:
            meta = r.pop("metadata") or {}
            hit = {**r, "score": round(float(r["score"]), 4) if r["score"] is not None else None}
            if meta.get("regions"):
                hit["regions"] = meta["regions"]
            out.append(hit)
        return out

    @server.tool()
    async def build_context(
        ctx: Context,
        kb: str,
        query: str,
        token_budget: int = 2000,
        method: str | None = None,
        filter: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Cited context for answering a question from a knowledge base: numbered blocks
        within token_budget, and the sources each number cites."""
        params = question(kb, query, method, filter)
        (row,) = await rows(
            ctx,
            "SELECT context, sources, has_relevant, fallback, tokens_used FROM "
            "kb.build_context(%(kb)s, %(query)s, token_budget => %(budget)s, "
            "method => %(method)s, filter => %(filter)s::jsonb)",
            budget=bounded(token_budget, "token_budget", 50, MAX_CONTEXT_TOKENS),
            **params,
        )
        return row

    @server.tool()
    async def read_document(
        ctx: Context, kb: str, document_id: int, offset: int = 0, max_chars: int = 8000
    ) -> dict[str, Any]:
        """A document's text from offset (characters), at most max_chars of it, with its
        title, source and metadata; next_offset reads on."""
        need(kb, "kb")
        bounded(max_chars, "max_chars", 1, MAX_TEXT_CHARS)
        if offset < 0:
            raise ToolError(f"offset must be 0 or more, not {offset}")
        found = await rows(
            ctx,
            "SELECT d.id AS document_id, d.title, d.source_uri, d.metadata, d.status, "
            "length(d.content) AS length, substr(d.content, %(offset)s + 1, %(max)s) AS text "
            "FROM kb.document d JOIN kb.knowledge_base k ON k.id = d.kb_id "
            "WHERE k.name = %(kb)s AND d.id = %(id)s",
            kb=kb,
            id=document_id,
            offset=offset,
            max=max_chars,
        )
        if not found:
            raise ToolError(
                f'document {document_id} is not in knowledge base "{kb}" (or not yours to read)'
            )
        doc = found[0]
        end = offset + len(doc["text"] or "")
        doc["next_offset"] = end if end < (doc["length"] or 0) else None
        return doc

    @server.tool()
    async def read_chunk(ctx: Context, kb: str, chunk_id: int) -> dict[str, Any]:
        """One chunk (a search hit) whole: its text, heading path, page and document."""
        need(kb, "kb")
        found = await rows(
            ctx,
            "SELECT c.id AS chunk_id, c.document_id, d.title, c.heading_path, c.page, "
            "c.content AS text, c.origin FROM kb.chunk c "
            "JOIN kb.knowledge_base k ON k.id = c.kb_id AND k.active_index_id = c.index_id "
            "JOIN kb.document d ON d.kb_id = c.kb_id AND d.id = c.document_id "
            "WHERE k.name = %(kb)s AND c.id = %(id)s",
            kb=kb,
            id=chunk_id,
        )
        if not found:
            raise ToolError(
                f'chunk {chunk_id} is not in knowledge base "{kb}" (or not yours to read)'
            )
        return found[0]

    @server.tool()
    async def table_of_contents(ctx: Context, kb: str, document_id: int) -> list[dict[str, Any]]:
        """A document's PageIndex tree (a KB built with the page_index or graph_index
        strategy): each node's id, depth, title, pages and summary, in reading order.
        read_section reads a node."""
        need(kb, "kb")
        found = await rows(
            ctx,
            "SELECT node_id, parent_id, depth, title, page_start, page_end, summary "
            "FROM kb.page_index_nodes WHERE kb = %(kb)s AND document_id = %(id)s ORDER BY ordinal",
            kb=kb,
            id=document_id,
        )
        if not found:
            raise ToolError(
                f'document {document_id} of knowledge base "{kb}" has no table of contents '
                "(its strategy builds none, or it is not yours to read)"
            )
        return found

    @server.tool()
    async def read_section(ctx: Context, kb: str, node_id: str) -> dict[str, Any]:
        """A PageIndex node's own text (from table_of_contents), its title path and pages."""
        need(kb, "kb")
        need(node_id, "node_id")
        found = await rows(
            ctx,
            "SELECT node_id, document_id, document, title_path, page_start, page_end, summary, "
            "text FROM kb.page_index_nodes WHERE kb = %(kb)s AND node_id = %(node)s",
            kb=kb,
            node=node_id,
        )
        if not found:
            raise ToolError(
                f'node {node_id!r} is not in knowledge base "{kb}" (or not yours to read)'
            )
        node = found[0]
        node["text"] = _clip(node["text"])
        return node

    @server.tool()
    async def entity_neighbours(
        ctx: Context, kb: str, name: str, hops: int = 1, max_vertices: int = 50
    ) -> list[dict[str, Any]]:
        """The vertices within hops of an entity (or a code symbol, a heading) in a
        knowledge base's knowledge graph, with the relation that reaches each."""
        need(kb, "kb")
        need(name, "name")
        bounded(hops, "hops", 1, 3)
        bounded(max_vertices, "max_vertices", 1, 200)
        return await rows(
            ctx,
            "SELECT vertex, kind, depth, via, from_vertex, direction, chunk_id "
            "FROM kb.graph_neighbours(%(kb)s, %(name)s, %(hops)s, %(max)s)",
            kb=kb,
            name=name,
            hops=hops,
            max=max_vertices,
        )

    server.kbpg_sessions = sessions  # type: ignore[attr-defined]
    return server


def http_app(server: Any, tokens: dict[str, str], path: str = "/mcp") -> Any:
    """The streamable HTTP app, behind a check of each request's bearer token."""
    from starlette.responses import JSONResponse

    app = server.streamable_http_app(streamable_http_path=path)

    class Tokens:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                scheme, _, token = (
                    headers.get(b"authorization", b"").decode("latin-1").partition(" ")
                )
                if scheme.lower() != "bearer" or token.strip() not in tokens:
                    reply = JSONResponse(
                        {"error": "a bearer token from the server's tokens file is required"},
                        status_code=401,
                        headers={"WWW-Authenticate": "Bearer"},
                    )
                    await reply(scope, receive, send)
                    return
            await self.inner(scope, receive, send)

    app.add_middleware(lambda inner: Tokens(inner))  # type: ignore[arg-type]
    return app


def serve(
    dsn: str | None,
    transport: str,
    host: str = "127.0.0.1",
    port: int = 8766,
    tokens_file: str | None = None,
) -> None:
    """Serve the tools over stdio or streamable HTTP until stopped."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError("kbpg mcp needs the MCP SDK", hint="pip install 'kbpg[mcp]'") from None
    if transport == "stdio":
        if tokens_file:
            raise ConfigError("--tokens is for --transport http; stdio runs as the DSN's role")
        server = build_server(dsn)
        server.run("stdio")
        return
    if not tokens_file:
        raise ConfigError(
            "kbpg mcp --transport http needs --tokens FILE (a JSON object of tokens to roles)",
            hint="every HTTP client is a role: its token decides what row-level security shows it",
        )
    tokens = load_tokens(tokens_file)
    server = build_server(dsn, tokens)
    import uvicorn

    log.info(
        "kbpg mcp: streamable HTTP on http://%s:%s/mcp for %d token(s)", host, port, len(tokens)
    )
    uvicorn.run(http_app(server, tokens), host=host, port=port, log_level="warning")
