"""`kbpg mcp` through the official SDK's own client, over stdio and streamable HTTP: the
tools, each call as its role under row-level security, and bad arguments as tool errors."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import psycopg
import pytest

from tests.helpers import run_worker

pytest.importorskip("mcp", reason="kbpg[mcp] is not installed")

DOCS = {
    "Harbour hours": "# Harbour hours\n\nThe harbour office opens at six and closes at ten.\n\n"
    "## Pilots\n\nA pilot boards every vessel over 80 metres.",
    "Cranes": "# Cranes\n\nEach crane lifts forty tonnes. Crane 4 is serviced on Mondays.",
}


@pytest.fixture
def roles(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[dict[str, str]]:
    """A team KB its reader may read, and an outsider in no team."""
    prefix = "m" + uuid.uuid4().hex[:8]
    names = {r: f"{prefix}_{r}" for r in ("admin", "reader", "outsider")}
    for role in names.values():
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        conn.execute("SELECT kb.create_team(%s, acting_as => %s)", (prefix, names["admin"]))
        conn.execute(
            "SELECT kb.add_team_member(%s, %s, acting_as => %s)",
            (prefix, names["reader"], names["admin"]),
        )
        with psycopg.connect(dsn, user=names["admin"], autocommit=True) as admin:
            admin.execute("SELECT kb.create_knowledge_base('port', team => %s)", (prefix,))
            for title, text in DOCS.items():
                admin.execute("SELECT kb.add_document('port', %s, %s)", (title, text))
        run_worker(dsn)
        yield names
    finally:
        for role in names.values():
            conn.execute(f'DROP OWNED BY "{role}" CASCADE')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def _data(result: Any) -> Any:
    assert not result.is_error, _text(result)
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if isinstance(content, dict) else content
    return json.loads(_text(result))


async def _exercise(client: Any, expect_kbs: list[str]) -> None:
    tools = {t.name for t in (await client.list_tools()).tools}
    assert {
        "list_knowledge_bases",
        "search",
        "build_context",
        "read_document",
        "read_chunk",
        "table_of_contents",
        "read_section",
        "entity_neighbours",
    } <= tools
    kbs = _data(await client.call_tool("list_knowledge_bases", {}))
    assert [k["name"] for k in kbs] == expect_kbs
    if not expect_kbs:
        # Row-level security: the KB does not exist for this role.
        denied = await client.call_tool("search", {"kb": "port", "query": "pilot"})
        assert denied.is_error and 'knowledge base "port" does not exist' in _text(denied)
        return
    hits = _data(
        await client.call_tool(
            "search", {"kb": "port", "query": "when does a pilot board", "top_k": 3}
        )
    )
    assert hits[0]["title"] == "Harbour hours" and hits[0]["heading_path"][-1] == "Pilots"
    doc = _data(
        await client.call_tool(
            "read_document", {"kb": "port", "document_id": hits[0]["document_id"], "max_chars": 20}
        )
    )
    assert doc["text"] == DOCS["Harbour hours"][:20] and doc["next_offset"] == 20
    chunk = _data(
        await client.call_tool("read_chunk", {"kb": "port", "chunk_id": hits[0]["chunk_id"]})
    )
    assert "pilot boards" in chunk["text"]
    context = _data(
        await client.call_tool("build_context", {"kb": "port", "query": "crane service day"})
    )
    assert "Mondays" in context["context"] and context["sources"][0]["title"] == "Cranes"
    # Bad arguments: a tool error that names what is wrong, never a crash.
    for args, message in (
        ({"kb": "port", "query": "x", "top_k": 500}, "top_k must be between 1 and 50"),
        ({"kb": "port", "query": "x", "method": "telepathy"}, "method"),
        ({"kb": "nope", "query": "x"}, 'knowledge base "nope" does not exist'),
        ({"kb": "port", "query": ""}, "query must not be empty"),
        ({"kb": "port"}, "query"),
    ):
        bad = await client.call_tool("search", args)
        assert bad.is_error and message in _text(bad), (args, _text(bad))
    toc = await client.call_tool(
        "table_of_contents", {"kb": "port", "document_id": hits[0]["document_id"]}
    )
    assert toc.is_error and "no table of contents" in _text(toc)


def test_stdio_runs_as_the_connections_role(dsn: str, roles: dict[str, str]) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "KBPG_"))}

    async def main(role: str, expect: list[str]) -> None:
        role_dsn = psycopg.conninfo.make_conninfo(dsn, user=role)
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "kbpg.cli", "--dsn", role_dsn, "mcp"], env=env
        )
        async with Client(params) as client:
            await _exercise(client, expect)

    anyio.run(main, roles["reader"], ["port"])
    anyio.run(main, roles["outsider"], [])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_http_maps_each_token_to_its_role(dsn: str, roles: dict[str, str]) -> None:
    import httpx2
    import uvicorn
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from kbpg.mcp_server import build_server, http_app

    tokens = {
        "reader-token-0123456789": roles["reader"],
        "outsider-token-012345678": roles["outsider"],
    }
    server = build_server(dsn, tokens)
    port = _free_port()
    web = uvicorn.Server(
        uvicorn.Config(http_app(server, tokens), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not web.started and time.monotonic() < deadline:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/mcp"
    try:

        async def main(token: str | None, expect: list[str]) -> None:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    await _exercise(client, expect)

        anyio.run(main, "reader-token-0123456789", ["port"])
        anyio.run(main, "outsider-token-012345678", [])

        async def refused(token: str | None) -> int:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with httpx2.AsyncClient(headers=headers, timeout=10) as http:
                reply = await http.post(
                    url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
                )
                return int(reply.status_code)

        assert anyio.run(refused, None) == 401
        assert anyio.run(refused, "not-a-token-at-all-xyz") == 401
    finally:
        web.should_exit = True
        thread.join(10)
        server.kbpg_sessions.close()


def test_tokens_file_errors(tmp_path: Any) -> None:
    from kbpg.errors import ConfigError
    from kbpg.mcp_server import load_tokens

    path = tmp_path / "tokens.json"
    for body, message in (
        ("[1]", "JSON object of tokens to role names"),
        ('{"short": "r"}', "under 16 characters"),
        ("{", "is not JSON"),
    ):
        path.write_text(body)
        with pytest.raises(ConfigError, match=message):
            load_tokens(path)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_tokens(tmp_path / "missing.json")
    path.write_text('{"a-long-enough-token-value": "reader"}')
    assert load_tokens(path) == {"a-long-enough-token-value": "reader"}
