"""Fetching a URL: one deadline for the whole answer, however the server paces it."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kbpg_db import fetch
from kbpg_db.convert import ConvertError, Limits


class _Drip(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body><p>" + b"x" * 40 + b"</p></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for byte in body:  # one byte every 0.2 s: no single read ever times out
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(0.2)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def drip() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Drip)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/page"
    server.shutdown()


@pytest.mark.parametrize("thread", ["main", "other"])
def test_a_dripping_server_is_stopped_at_the_fetch_deadline(drip: str, thread: str) -> None:
    limits = Limits(fetch_timeout_s=1.0)
    errors: list[BaseException] = []

    def get() -> None:
        try:
            fetch._get(drip, limits)
        except BaseException as exc:
            errors.append(exc)

    started = time.monotonic()
    if thread == "main":
        get()
    else:
        t = threading.Thread(target=get)
        t.start()
        t.join(30)
    took = time.monotonic() - started
    assert took < 3.0, f"the fetch took {took:.1f} s; its deadline is 1 s"
    (err,) = errors
    assert isinstance(err, ConvertError)
    assert str(err) == f"{drip} did not answer within 1 s (kb.fetch_timeout_s)"
