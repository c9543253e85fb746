"""Per-document chunking: one document split its own way,
the others as their KB says, kept across reindexes; bad settings named, nothing changed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_config, remote_kb, run_worker

TEXT = " ".join(f"Sentence number {i} says something about topic {i}." for i in range(12))


def chunks(conn: psycopg.Connection[Any], title: str) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT c.content FROM kb.chunk c JOIN kb.document d ON d.id = c.document_id"
            " JOIN kb.knowledge_base k ON k.active_index_id = c.index_id"
            " WHERE d.title = %s ORDER BY c.ordinal",
            (title,),
        )
    ]


def test_one_document_chunked_its_own_way_across_reindexes(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "docs", chunker="recursive", chunk_size=200, chunk_overlap=0)
    client.add_text("docs", "own.md", TEXT)
    client.add_text("docs", "plain.md", TEXT)
    run_worker(conn.info.dsn)
    assert len(chunks(conn, "own.md")) == 1 == len(chunks(conn, "plain.md"))
    client.set_document_chunking(
        "docs", "own.md", {"chunker": "sentence", "sentences_per_chunk": 2}
    )
    run_worker(conn.info.dsn)
    own = chunks(conn, "own.md")
    assert len(own) == 6 and own[0].count("Sentence number") == 2
    assert len(chunks(conn, "plain.md")) == 1
    stored = conn.execute(
        "SELECT chunking FROM kb.document_status WHERE title = 'own.md'"
    ).fetchone()
    assert stored == ({"chunker": "sentence", "sentences_per_chunk": 2},)
    # A reindex with another KB config keeps the document's own settings.
    client.reindex_knowledge_base(
        "docs", remote_config(provider, chunker="fixed_size", chunk_size=40, chunk_overlap=0)
    )
    run_worker(conn.info.dsn)
    assert len(chunks(conn, "own.md")) == 6
    assert len(chunks(conn, "plain.md")) > 1
    # NULL clears them: the KB's settings again.
    client.set_document_chunking("docs", "own.md", None)
    run_worker(conn.info.dsn)
    assert chunks(conn, "own.md") == chunks(conn, "plain.md")


def test_bad_chunking_is_named_and_changes_nothing(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "docs", chunker="recursive", chunk_size=100, chunk_overlap=0)
    client.add_text("docs", "a.md", TEXT)
    run_worker(conn.info.dsn)
    before = chunks(conn, "a.md")
    cases = [
        ({"chunkr": "sentence"}, 'chunking: unknown field "chunkr"'),
        ({"embedding_model": "openai/x"}, "chunking: embedding_model is the knowledge base's"),
        ({"chunk_overlap": 150}, r"chunk_overlap \(150\) must be smaller than chunk_size \(100\)"),
        ({"chunker": "words"}, "chunking: unknown chunker"),
    ]
    for bad, message in cases:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            conn.execute(
                "SELECT kb.set_document_chunking('docs', 'a.md', %s)",
                (psycopg.types.json.Jsonb(bad),),
            )
        conn.rollback()
    # Written directly, it is checked the same way.
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown field"):
        conn.execute("UPDATE kb.document SET chunking = '{\"x\": 1}' WHERE title = 'a.md'")
    conn.rollback()
    with pytest.raises(psycopg.errors.NoDataFound, match=r'document "nope\.md" does not exist'):
        conn.execute("SELECT kb.set_document_chunking('docs', 'nope.md', '{}')")
    conn.rollback()
    assert conn.execute("SELECT chunking, status FROM kb.document").fetchall() == [(None, "ready")]
    assert chunks(conn, "a.md") == before
