"""Web sources: pages fetched again on a schedule, from a local server this test scripts.
A page that has not changed (HTTP 304, or the same text) re-indexes nothing; a changed
page re-embeds only its changed chunks; a failure keeps the version indexed serving; a
page gone three fetches in a row is removed. Requests and embeddings are counted."""

from __future__ import annotations

import http.server
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker


def page(name: str, edit: str = "") -> bytes:
    parts = [f"# {name}\n"]
    for p in range(4):
        said = edit if (p == 2 and edit) else f"part {p} of page {name} says what it always said"
        parts.append(f"## Part {p}\n\n{said}, in enough words for one chunk of its own.\n")
    return "\n".join(parts).encode()


class Site:
    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, bytes, str | None]] = {}  # path -> status, body, etag
        self.requests: Counter[str] = Counter()
        self.conditional: Counter[str] = Counter()
        self.not_modified: Counter[str] = Counter()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests[self.path] += 1
                status, body, etag = owner.pages.get(self.path, (404, b"", None))
                if self.headers.get("If-None-Match"):
                    owner.conditional[self.path] += 1
                    if etag is not None and self.headers["If-None-Match"] == etag:
                        owner.not_modified[self.path] += 1
                        self.send_response(304)
                        self.end_headers()
                        return
                self.send_response(status)
                self.send_header("Content-Type", "text/markdown; charset=utf-8")
                if etag is not None:
                    self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    yield s
    s.server.shutdown()


def built(provider: FakeProvider) -> list[str]:
    return [t for t in provider.embedded_texts if "# " in t]


def refresh(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    rows = conn.execute("SELECT * FROM kb.refresh_url_sources(force => true)").fetchall()
    run_worker(conn.info.dsn)
    return rows


def states(conn: psycopg.Connection[Any]) -> dict[str, tuple[Any, ...]]:
    return {
        r[0].rsplit("/", 1)[1]: r[1:]
        for r in conn.execute(
            "SELECT source_key, status, source_meta->>'gone', source_meta->>'fetch_error' "
            "FROM kb.document ORDER BY source_key"
        )
    }


def test_pages_follow_their_site(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, site: Site
) -> None:
    remote_kb(client, conn, provider, "web")
    site.pages = {
        "/a.md": (200, page("alpha"), '"a1"'),  # with an ETag
        "/b.md": (200, page("beta"), None),  # without one
        "/c.md": (200, page("gamma"), None),
        "/d.md": (200, page("delta"), None),
    }
    urls = [f"{site.url}/{n}.md" for n in "abcd"]
    client.add_url_source("web", "site", urls, refresh_interval="1 hour", render=False)
    run_worker(conn.info.dsn)
    assert {s[0] for s in states(conn).values()} == {"ready"}
    first = len(built(provider))
    assert first >= 16
    # Due in an hour: nothing is fetched before.
    assert conn.execute("SELECT * FROM kb.refresh_url_sources()").fetchall() == []

    # Nothing changed: a conditional request where the page has an ETag (304), the same
    # text elsewhere; nothing is embedded.
    assert refresh(conn) == [("web", "site", 4)]
    assert site.not_modified["/a.md"] == 1 and site.requests["/b.md"] == 2
    assert len(built(provider)) == first
    assert {s[0] for s in states(conn).values()} == {"ready"}

    # b changes one part, c fails for a while, d is gone.
    site.pages["/b.md"] = (200, page("beta", edit="beta now says something new"), None)
    site.pages["/c.md"] = (503, b"busy", None)
    site.pages["/d.md"] = (404, b"", None)
    refresh(conn)
    assert built(provider)[first:] == [t for t in built(provider)[first:] if "something new" in t]
    assert len(built(provider)) == first + 1  # only b's changed part
    got = states(conn)
    assert got["c.md"][0] == "ready" and "503" in got["c.md"][2]
    assert got["d.md"][:2] == ("ready", "1")
    # The failing and the missing pages still answer with the version indexed.
    hits = {h.title for h in client.search("web", "part 1 of page gamma")}
    assert f"{site.url}/c.md" in hits
    assert (
        "beta now says something new" in client.search("web", "something new", top_k=1)[0].content
    )

    # c is back; d stays gone: removed at its third 404 in a row.
    site.pages["/c.md"] = (200, page("gamma"), None)
    refresh(conn)
    got = states(conn)
    assert got["c.md"] == ("ready", None, None) and got["d.md"][1] == "2"
    refresh(conn)
    assert "d.md" not in states(conn)
    assert f"{site.url}/d.md" not in {h.title for h in client.search("web", "page delta")}
    src = conn.execute(
        "SELECT documents, ready, failed FROM kb.sources WHERE source = 'site'"
    ).fetchone()
    assert src == (3, 3, 0)


def test_url_source_errors(client: Client, conn: psycopg.Connection[Any]) -> None:
    client.create_knowledge_base("web")
    cases = [
        ("'s', '{}'", "urls must name at least one page"),
        ("'s', ARRAY['https://x.test/'], refresh_interval => '10 seconds'", "at least 1 minute"),
        ("'s', ARRAY['ftp://x.test/']", "url must be an http or https URL"),
        ("'', ARRAY['https://x.test/']", "a source needs a name"),
    ]
    for args, message in cases:
        with pytest.raises(psycopg.Error, match=message):
            conn.execute(f"SELECT kb.add_url_source('web', {args})")
    assert conn.execute("SELECT count(*) FROM kb.source").fetchone() == (0,)
