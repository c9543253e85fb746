"""Knowledge-base and document lifecycle through the SQL API, with its errors."""

from __future__ import annotations

import psycopg
import pytest

from kbpg.client import Client
from kbpg.errors import ConfigError, DocumentError, NotFoundError
from tests.helpers import run_worker


def test_create_list_show_drop(client: Client) -> None:
    kb_id = client.create_knowledge_base("docs", {"chunk_size": 120}, {"top_k": 5})
    assert kb_id > 0
    kb = client.knowledge_base("docs")
    assert kb["indexing_config"]["chunk_size"] == 120
    assert kb["indexing_config"]["chunker"] == "markdown_header"  # defaults filled in
    assert kb["retrieval_config"]["top_k"] == 5
    assert kb["embedding_model"] == "local/all-MiniLM-L6-v2"
    assert kb["embedding_dim"] == 384
    assert [r["name"] for r in client.list_knowledge_bases()] == ["docs"]
    assert client.drop_knowledge_base("docs") is True
    assert client.list_knowledge_bases() == []
    assert client.drop_knowledge_base("docs", if_exists=True) is False


def test_errors_name_what_is_wrong(client: Client, conn: psycopg.Connection) -> None:
    client.create_knowledge_base("docs")
    with pytest.raises(ConfigError, match='"docs" already exists') as dup:
        client.create_knowledge_base("docs")
    assert dup.value.sqlstate == "23505"
    with pytest.raises(NotFoundError, match='"nope" does not exist') as missing:
        client.add_text("nope", "t", "text")
    assert missing.value.sqlstate == "P0002"
    with pytest.raises(ConfigError, match="chunk_size") as bad:
        client.create_knowledge_base("bad", {"chunk_size": "big"})
    assert bad.value.sqlstate == "22023"
    with pytest.raises(ConfigError, match="chunk_sise"):
        client.create_knowledge_base("bad", {"chunk_sise": 100})
    with pytest.raises(ConfigError, match="exceeds the 200-token input"):
        client.create_knowledge_base("bad", {"chunk_size": 1000})
    with pytest.raises(ConfigError, match="text_search_config"):
        client.create_knowledge_base("bad", {"text_search_config": "klingon"})
    with pytest.raises(ConfigError, match="embedding_dimensions is required"):
        client.create_knowledge_base("bad", {"embedding_model": "openai/unknown-model"})
    with pytest.raises(ConfigError, match="vector_weight"):
        client.create_knowledge_base("bad", {}, {"vector_weight": 2})
    with pytest.raises(ConfigError, match="empty"):
        client.create_knowledge_base("  ")
    # Nothing half-created by the failures.
    assert [r["name"] for r in client.list_knowledge_bases()] == ["docs"]
    assert conn.execute("SELECT count(*) FROM kb.kb_index").fetchone()[0] == 1


def test_dba_writes_are_validated(client: Client, conn: psycopg.Connection) -> None:
    client.create_knowledge_base("docs")
    conn.execute(
        "UPDATE kb.knowledge_base SET retrieval_config = '{\"top_k\": 7}' WHERE name = 'docs'"
    )
    assert client.knowledge_base("docs")["retrieval_config"]["top_k"] == 7
    assert client.knowledge_base("docs")["retrieval_config"]["method"] == "hybrid"
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="top_k"):
        conn.execute("UPDATE kb.knowledge_base SET retrieval_config = '{\"top_k\": -1}'")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="reindex_knowledge_base"):
        conn.execute("UPDATE kb.knowledge_base SET embedding_dim = 12")
    conn.execute("UPDATE kb.knowledge_base SET description = 'ok to write'")


def test_add_replace_unchanged_delete(client: Client, conn: psycopg.Connection) -> None:
    client.create_knowledge_base("docs")
    first = client.add_text("docs", "Guide", "# Guide\nHello world.", {"category": "a"})
    assert first.action == "added"
    again = client.add_text("docs", "Guide", "# Guide\nHello world.", {"category": "a"})
    assert (again.action, again.document_id) == ("unchanged", first.document_id)
    changed = client.add_text("docs", "Guide", "# Guide\nHello there.", {"category": "a"})
    assert (changed.action, changed.document_id) == ("replaced", first.document_id)
    # One queued job per version; the superseded one was cancelled.
    jobs = conn.execute("SELECT status FROM kb.job ORDER BY id").fetchall()
    assert [j[0] for j in jobs] == ["cancelled", "queued"]
    assert client.delete_document("docs", "Guide") is True
    with pytest.raises(NotFoundError, match='"Guide" does not exist'):
        client.delete_document("docs", "Guide")


def test_add_document_enqueues_in_the_same_transaction(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:  # not autocommit
        conn.execute("SELECT kb.create_knowledge_base('docs')")
        conn.commit()
        conn.execute("SELECT kb.add_document('docs', 'A', 'some text')")
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM kb.job").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM kb.document").fetchone()[0] == 0
        doc_id = conn.execute("SELECT kb.add_document('docs', 'A', 'some text')").fetchone()[0]
        conn.commit()
        assert conn.execute("SELECT document_id FROM kb.job").fetchone()[0] == doc_id


@pytest.mark.parametrize(
    ("content", "message"),
    [("", "has no text"), ("   \n\t ", "has no text"), (None, "has no text")],
)
def test_bad_documents(client: Client, content: str | None, message: str) -> None:
    client.create_knowledge_base("docs")
    with pytest.raises(ConfigError, match=message):
        client.add_text("docs", "T", content)  # type: ignore[arg-type]


def test_document_limits_and_fields(client: Client, conn: psycopg.Connection) -> None:
    client.create_knowledge_base("docs")
    conn.execute("SET kb.max_document_bytes = 1000")
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="limit is 1000 bytes"):
        conn.execute("SELECT kb.add_document('docs', 'big', repeat('x', 2000))")
    with pytest.raises(ConfigError, match="usage_mode"):
        client.add_text("docs", "T", "text", usage_mode="sometimes")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="metadata"):
        conn.execute("SELECT kb.add_document('docs', 'T', 'text', '[1, 2]')")
    with pytest.raises(ConfigError, match="page_starts"):
        client.add_text("docs", "T", "text", page_starts=[3, 1])
    with pytest.raises(DocumentError):
        conn.execute("SET kb.max_document_bytes = 10")
        client.conn.execute("SET kb.max_document_bytes = 10")
        client.add_text("docs", "T2", "longer than ten bytes")
    assert conn.execute("SELECT count(*) FROM kb.document").fetchone()[0] == 0


@pytest.mark.parametrize(
    "name",
    [
        "it's",
        'quote"d',
        "x'); DROP TABLE kb.document; --",
        "kb; SELECT pg_sleep(10)",
        "Ünïcødé 知识库 🚀",
        "a\\b",
    ],
)
def test_hostile_names_are_just_names(client: Client, conn: psycopg.Connection, name: str) -> None:
    client.create_knowledge_base(name)
    result = client.add_text(name, name, f"Text about {name}.")
    assert result.action == "added"
    assert client.knowledge_base(name)["name"] == name
    assert client.document_status(name)[0]["title"] == name
    assert conn.execute("SELECT count(*) FROM kb.document").fetchone()[0] == 1
    assert client.drop_knowledge_base(name)


def test_dba_metadata_update_reaches_filters(client: Client, conn: psycopg.Connection) -> None:
    from tests.fakeprovider import FakeProvider
    from tests.helpers import remote_kb, run_worker

    with FakeProvider() as provider:
        remote_kb(client, conn, provider, "m")
        client.add_text("m", "tea", "Green tea is brewed at 80 degrees.", {"category": "food"})
        run_worker(conn.info.dsn)
        conn.execute('UPDATE kb.document SET metadata = \'{"category": "drinks"}\'')
        assert client.search("m", "tea", method="full_text", filter={"category": "food"}) == []
        rows = client.search("m", "tea", method="full_text", filter={"category": "drinks"})
        assert [r.title for r in rows] == ["tea"]


def test_replacement_keeps_old_chunks_until_new_ones_are_ready(
    client: Client, conn: psycopg.Connection
) -> None:
    from tests.fakeprovider import FakeProvider
    from tests.helpers import remote_kb, run_worker

    with FakeProvider() as provider:
        remote_kb(client, conn, provider, "r")
        client.add_text("r", "doc", "The old text talks about zebras.")
        run_worker(conn.info.dsn)
        assert (
            client.add_text("r", "doc", "The new text talks about giraffes.").action == "replaced"
        )
        # Not indexed yet: searches still find the complete old version.
        assert [r.title for r in client.search("r", "zebras", method="full_text")] == ["doc"]
        assert client.search("r", "giraffes", method="full_text") == []
        assert client.document_status("r")[0]["status"] == "pending"
        run_worker(conn.info.dsn)
        assert client.search("r", "zebras", method="full_text") == []
        assert [r.title for r in client.search("r", "giraffes", method="full_text")] == ["doc"]


def test_one_megabyte_single_line_file(client: Client, conn: psycopg.Connection, tmp_path) -> None:
    from tests.fakeprovider import FakeProvider
    from tests.helpers import remote_kb, run_worker

    line = tmp_path / "line.txt"
    line.write_text(("alpha beta gamma delta " * 45_000)[:1_000_000])
    with FakeProvider() as provider:
        remote_kb(
            client, conn, provider, "big", chunker="fixed_size", chunk_size=1000, chunk_overlap=0
        )
        client.add_file("big", line)
        run_worker(conn.info.dsn)
    doc = client.document_status("big")[0]
    assert doc["status"] == "ready" and doc["chunk_count"] > 100
    covered = conn.execute("SELECT max(char_end) FROM kb.chunk").fetchone()[0]
    assert covered >= 999_990


def test_index_generations_show_which_serves_and_their_jobs(
    client: Client, conn: psycopg.Connection, dsn: str
) -> None:
    client.create_knowledge_base("gens", {"chunk_size": 64, "chunk_overlap": 8})
    client.add_text("gens", "A", "# A\n\nAlpha text about apples.")
    client.add_text("gens", "B", "# B\n\nBeta text about bananas.")
    run_worker(dsn)
    client.reindex_knowledge_base("gens", {"chunk_size": 128, "chunk_overlap": 8})
    rows = conn.execute(
        "SELECT status, serving, strategy, indexing_config->>'chunk_size', jobs_done, "
        "jobs_waiting, jobs_failed FROM kb.index_generations('gens')"
    ).fetchall()
    assert rows == [
        ("building", False, "chunk_embed", "128", 0, 2, 0),
        ("active", True, "chunk_embed", "64", 2, 0, 0),
    ]
    latest = "SELECT status, serving FROM kb.index_generations('gens', latest => 1)"
    assert conn.execute(latest).fetchall() == [("building", False)]
    run_worker(dsn)
    first = conn.execute("SELECT status, serving, chunks > 0 FROM kb.index_generations('gens')")
    assert first.fetchone() == ("active", True, True)
    with pytest.raises(psycopg.errors.NoDataFound, match='knowledge base "nope" does not exist'):
        conn.execute("SELECT * FROM kb.index_generations('nope')")
