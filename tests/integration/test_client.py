"""Client and AsyncClient: one API table, the same methods and results on both drivers."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from kbpg.client import API, AsyncClient, Client, _asyncpg_params
from kbpg.errors import BusyError, ConfigError, NotFoundError
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_config, run_worker


def test_both_clients_have_every_method() -> None:
    assert {"search", "explain_search", "build_context", "reindex_knowledge_base"} <= set(API)
    for name in API:
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
        assert not inspect.iscoroutinefunction(getattr(Client, name)), name
        sync = inspect.signature(getattr(Client, name))
        assert sync == inspect.signature(getattr(AsyncClient, name)), name


def test_asyncpg_params_from_any_libpq_form() -> None:
    assert _asyncpg_params("host=/tmp/x port=5433 dbname='my db' user=u") == {
        "host": "/tmp/x",
        "port": 5433,
        "database": "my db",
        "user": "u",
    }
    assert _asyncpg_params("postgresql://u:p@h:5/d")["password"] == "p"


def test_async_client_round_trip(dsn: str, client: Client, provider: FakeProvider) -> None:
    client.conn.execute("SELECT 1")
    from tests.helpers import allow_fake_key

    allow_fake_key(client.conn)

    async def go() -> None:
        async with await AsyncClient.connect(dsn) as a:
            await a.create_knowledge_base("ak", remote_config(provider))
            put = await a.add_text("ak", "tea", "Green tea is brewed at 80 degrees.")
            assert put.action == "added"
            run_worker(dsn)
            [status] = await a.document_status("ak")
            assert status["status"] == "ready"
            hits = await a.search("ak", "tea", method="full_text")
            assert [h.title for h in hits] == ["tea"]
            explained = await a.explain_search("ak", "tea", method="full_text")
            assert explained[0]["bm25_rank"] == 1
            assert (await a.knowledge_base("ak"))["name"] == "ak"
            assert await a.reindex_knowledge_base("ak") > 0
            with pytest.raises(BusyError):
                await a.reindex_knowledge_base("ak")
            assert await a.queue_status()
            assert await a.reindex_document("ak", "tea") > 0
            assert await a.delete_document("ak", "tea")
            with pytest.raises(NotFoundError):
                await a.search("nope", "tea")
            with pytest.raises(ConfigError, match="top_k must be between 1 and 1000"):
                await a.search("ak", "tea", top_k=0)

    asyncio.run(go())


def test_document_listing_costs_its_own_kb_only(dsn: str) -> None:
    """kb.list_documents lists one KB's documents (or one title) in id order, and reads
    them by index however many documents another KB holds."""
    import psycopg

    with Client(dsn) as client, psycopg.connect(dsn, autocommit=True) as conn:
        client.create_knowledge_base("big")
        client.create_knowledge_base("small")
        conn.execute(
            "SELECT kb.add_document('big', 'd' || i, 'text ' || i) FROM generate_series(1, 3000) i"
        )
        for title in ("b", "a", "c"):
            client.add_text("small", title, f"text {title}")
        conn.execute("ANALYZE kb.document")
        docs = client.document_status("small")
        assert [d["title"] for d in docs] == ["b", "a", "c"]
        assert [d["title"] for d in client.document_status("small", "a")] == ["a"]
        small = conn.execute("SELECT id FROM kb.knowledge_base WHERE name = 'small'").fetchone()[0]
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                f"EXPLAIN SELECT * FROM kb.document_status s WHERE s.kb_id = {int(small)} "
                "ORDER BY s.document_id"
            )
        )
        assert "Index Cond: (kb_id = " in plan and "Seq Scan on document d " not in plan, plan
