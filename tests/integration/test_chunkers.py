"""The chunkers through the database: kb.preview_chunks shows each, and the semantic
chunker embeds sentences with the KB's own model while indexing."""

from __future__ import annotations

import json

import psycopg
import pytest

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker

TEXT = (
    "# Cats\nCats purr when content. Cats sleep most of the day.\n\n"
    "| breed | coat |\n|---|---|\n| siamese | short |\n| persian | long |\n\n"
    "# Rockets\nRockets burn fuel to climb. Rockets need oxygen. Rockets reach orbit fast.\n"
)


@pytest.mark.parametrize(
    "chunker",
    ["markdown_header", "recursive", "fixed_size", "cjk", "paragraph", "sentence", "semantic"],
)
def test_preview_shows_every_chunker(client: Client, chunker: str) -> None:
    rows = client._rows(
        "SELECT ordinal, content, char_start, char_end, token_count FROM kb.preview_chunks($1, $2)",
        [TEXT, json.dumps({"chunker": chunker, "chunk_size": 40, "chunk_overlap": 0})],
    )
    assert rows and all(r["token_count"] <= 40 for r in rows)
    assert all(TEXT[r["char_start"] : r["char_end"]] in r["content"] for r in rows)
    if chunker not in ("fixed_size", "cjk"):  # these cut where the size says
        table = "| breed | coat |\n|---|---|\n| siamese | short |\n| persian | long |"
        assert any(table in r["content"] for r in rows), chunker


def test_semantic_chunker_indexes_with_the_kb_model(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "sem", chunker="semantic", chunk_size=60, chunk_overlap=0)
    client.add_text("sem", "animals-and-rockets", TEXT)
    run_worker(conn.info.dsn)
    # The sentences went to the KB's model first, then the chunks.
    assert "Cats sleep most of the day." in provider.embedded_texts
    status = client.document_status("sem")[0]
    assert status["status"] == "ready" and status["chunk_count"] >= 2
    hits = client.search("sem", "rockets orbit", method="full_text")
    assert "Rockets" in hits[0].content
