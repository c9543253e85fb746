"""Shared test helpers."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from kbpg_db import convert
from psycopg import sql

from kbpg.client import Client
from tests.fakeprovider import FakeProvider

# OCR's tests need Debian's Tesseract (make setup installs it); elsewhere they say so.
needs_tesseract = pytest.mark.skipif(
    convert.ocr._tesseract() is None, reason="Tesseract is not installed (make setup installs it)"
)


def remote_config(provider: FakeProvider, **extra: Any) -> dict[str, Any]:
    """An indexing_config embedding through the fake provider over real HTTP."""
    return {
        "embedding_model": "openai/fake-embed",
        "embedding_dimensions": provider.dim,
        "api_base": provider.url + "/v1",
        "api_key_name": "FAKE_KEY",
        "max_retries": 3,
        **extra,
    }


def allow_fake_key(conn: psycopg.Connection[Any]) -> None:
    """Give every new session of this test database the fake provider's key."""
    db = conn.execute("SELECT current_database()").fetchone()[0]
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET kb.fake_key = 'test-key'").format(sql.Identifier(db))
    )


def remote_kb(
    client: Client,
    conn: psycopg.Connection[Any],
    provider: FakeProvider,
    name: str,
    retrieval: dict[str, Any] | None = None,
    **extra: Any,
) -> None:
    allow_fake_key(conn)
    client.create_knowledge_base(name, remote_config(provider, **extra), retrieval or {})
    # The client's own session predates ALTER DATABASE: give it the key too.
    client.conn.execute("SET kb.fake_key = 'test-key'")


def full_text_kb(
    client: Client,
    conn: psycopg.Connection[Any],
    provider: FakeProvider,
    name: str,
    docs: dict[str, str],
    **extra: Any,
) -> None:
    """A remote-embedding KB searched by full_text by default, holding ``docs`` (title ->
    text), indexed."""
    remote_kb(client, conn, provider, name, {"method": "full_text"}, **extra)
    for title, text in docs.items():
        client.add_text(name, title, text)
    run_worker(conn.info.dsn)


def run_worker(dsn: str, concurrency: int = 1, timeout: float = 300, **kwargs: Any) -> Any:
    """Drain the queue with an in-process worker; fail (not hang) if it cannot."""
    import threading

    from kbpg.worker import Worker

    worker = Worker(dsn, concurrency=concurrency, once=True, poll_interval=0.1, **kwargs)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        raise AssertionError(f"the worker did not drain the queue within {timeout:.0f} s")
    return result[0]
