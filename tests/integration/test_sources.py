"""Sources: a knowledge base that follows a folder (kbpg sync). New files are indexed,
changed ones re-embed only their changed chunks, renamed ones move without embedding,
removed ones stop answering; a sync that would empty a source stops; a failed document
waits until kb.retry_failed. Embeddings are counted at the provider (real HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from kbpg.errors import KbpgError
from kbpg.sync import sync
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker


def write_doc(path: Path, name: str, paragraphs: int = 6, edit: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"# {name}\n"]
    for p in range(paragraphs):
        said = "now says something new" if p == edit else "says what it always said"
        parts.append(
            f"## Part {p}\n\nPart {p} of {name} {said} about topic {name}-{p}, "
            f"in words enough to fill one chunk of its own here.\n"
        )
    path.write_text("\n".join(parts))


def documents(conn: psycopg.Connection[Any]) -> dict[str, tuple[Any, ...]]:
    return {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT title, status, chunk_count, chunks_reused, source, source_key "
            "FROM kb.document_status WHERE kb = 'docs' ORDER BY title"
        )
    }


def cited(client: Client, query: str) -> set[str]:
    return {r.title for r in client.search("docs", query, top_k=20)}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    for name in ("alpha", "beta", "gamma"):
        write_doc(root / f"{name}.md", name)
    write_doc(root / "deep" / "delta.md", "delta")
    return root


def test_sync_follows_a_folder(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, folder: Path
) -> None:
    remote_kb(client, conn, provider, "docs", chunk_size=40, chunk_overlap=0)
    quiet: list[str] = []
    # A dry run lists what would change, and changes nothing (not even the source).
    plan, counts = sync(client, "docs", folder, dry_run=True, report=quiet.append)
    assert counts["added"] == 4 and sorted(quiet)[0].startswith("added")
    assert client.sources("docs") == [] and documents(conn) == {}

    plan, done = sync(client, "docs", folder, report=quiet.append)
    assert done["added"] == 4
    run_worker(conn.info.dsn)
    first = len(provider.embedded_texts)
    docs = documents(conn)
    assert set(docs) == {"alpha.md", "beta.md", "gamma.md", "deep/delta.md"}
    assert {d[0] for d in docs.values()} == {"ready"}
    assert {d[3] for d in docs.values()} == {plan.source}
    chunks_of_beta = docs["beta.md"][1]
    assert chunks_of_beta >= 6

    # Unchanged: nothing is put, nothing embedded.
    _, done = sync(client, "docs", folder, report=quiet.append)
    assert done["unchanged"] == 4 and done["added"] == done["changed"] == 0
    run_worker(conn.info.dsn)
    assert len(provider.embedded_texts) == first

    # One paragraph edited, one file renamed, one deleted.
    write_doc(folder / "beta.md", "beta", edit=3)
    (folder / "gamma.md").rename(folder / "deep" / "gamma-renamed.md")
    (folder / "alpha.md").unlink()
    _, done = sync(client, "docs", folder, report=quiet.append)
    assert (done["changed"], done["moved"], done["removed"], done["unchanged"]) == (1, 1, 1, 1)
    run_worker(conn.info.dsn)
    new_texts = provider.embedded_texts[first:]
    # Only the edited paragraph's chunk was embedded again; the renamed file not at all.
    assert len(new_texts) == 1 and "now says something new" in new_texts[0]
    docs = documents(conn)
    assert set(docs) == {"beta.md", "deep/gamma-renamed.md", "deep/delta.md"}
    assert docs["beta.md"][2] == chunks_of_beta - 1  # chunks_reused
    assert docs["deep/gamma-renamed.md"][2] == docs["deep/gamma-renamed.md"][1]
    assert docs["deep/gamma-renamed.md"][4] == "deep/gamma-renamed.md"
    # Nothing cites what is gone or its old name; the moved file answers by its new one.
    assert "alpha.md" not in cited(client, "topic alpha-2")
    assert "gamma.md" not in cited(client, "topic gamma-2")
    assert "deep/gamma-renamed.md" in cited(client, "topic gamma-2")
    assert "beta.md" in cited(client, "now says something new")
    # The reused vectors are the ones computed before (same model, same text).
    usage = conn.execute(
        "SELECT chunks_reused FROM kb.knowledge_base_usage WHERE kb = 'docs'"
    ).fetchone()
    assert usage == (chunks_of_beta - 1 + docs["deep/gamma-renamed.md"][1],)
    src = client.sources("docs")[0]
    assert (src["documents"], src["ready"], src["queued"], src["failed"]) == (3, 3, 0, 0)
    assert src["last_sync"]["removed"] == 1 and src["last_error"] is None


def test_sync_that_would_empty_a_source_stops(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, folder: Path
) -> None:
    remote_kb(client, conn, provider, "docs")
    sync(client, "docs", folder, report=lambda _line: None)
    for f in ("alpha.md", "beta.md", "gamma.md"):
        (folder / f).unlink()
    with pytest.raises(KbpgError, match=r"would remove 3 of the 4 documents.*nothing was changed"):
        sync(client, "docs", folder, report=lambda _line: None)
    assert len(documents(conn)) == 4
    _, done = sync(client, "docs", folder, force=True, report=lambda _line: None)
    assert done["removed"] == 3 and set(documents(conn)) == {"deep/delta.md"}


def test_a_title_of_another_source_is_a_conflict(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, tmp_path: Path
) -> None:
    remote_kb(client, conn, provider, "docs")
    write_doc(tmp_path / "one" / "same.md", "one")
    write_doc(tmp_path / "two" / "same.md", "two")
    client.add_text("docs", "by-hand.md", "Added by hand, not by a sync.")
    sync(client, "docs", tmp_path / "one", report=lambda _line: None)
    lines: list[str] = []
    _, done = sync(client, "docs", tmp_path / "two", report=lines.append)
    assert done["conflict"] == 1 and done["added"] == 0
    assert any(line.startswith("conflict  same.md") for line in lines)
    docs = documents(conn)
    assert docs["same.md"][3] == str((tmp_path / "one").resolve())
    assert docs["by-hand.md"][3] is None  # documents added by hand keep working
    # Dropping a source keeps its documents as hand-added ones, unless asked.
    assert client.drop_source("docs", str((tmp_path / "one").resolve())) == 1
    assert documents(conn)["same.md"][3] is None


def test_sync_errors_name_what_is_wrong(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, tmp_path: Path
) -> None:
    remote_kb(client, conn, provider, "docs")
    with pytest.raises(KbpgError, match="not a folder"):
        sync(client, "docs", tmp_path / "missing", report=lambda _line: None)
    cases = [
        ("SELECT kb.sync_plan('docs', 'nope', '[]')", 'source "nope" does not exist'),
        ("SELECT kb.add_source('docs', 'x', '/x', 'ftp')", 'unknown kind "ftp"'),
        ("SELECT kb.add_source('docs', '', '/x')", "a source needs a name"),
    ]
    conn.execute("SELECT kb.add_source('docs', 's', '/data')")
    cases += [
        ("SELECT kb.add_source('docs', 's', '/other')", 'already reads folder "/data"'),
        ("SELECT kb.sync_plan('docs', 's', '{}')", "files must be a JSON array"),
        ("SELECT kb.sync_plan('docs', 's', '[{\"key\": \"a\"}]')", "files must be a JSON array"),
        (
            "SELECT kb.sync_plan('docs', 's', "
            '\'[{"key": "a", "hash": "1"}, {"key": "a", "hash": "2"}]\')',
            "names a key more than once",
        ),
        ("SELECT kb.move_document('docs', 999999, 'x.md')", "document 999999 does not exist"),
        ("SELECT kb.retry_failed('docs', 'nope.md')", 'document "nope.md" does not exist'),
    ]
    for sql, message in cases:
        with pytest.raises(psycopg.Error, match=message):
            conn.execute(sql)


def test_failed_documents_wait_for_retry_failed(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "docs")
    client.add_text("docs", "bad.md", "This text holds POISON, which the provider refuses.")
    client.add_text("docs", "good.md", "This text is fine.")
    run_worker(conn.info.dsn)
    status = {d["title"]: d for d in client.document_status("docs")}
    assert status["bad.md"]["status"] == "error" and "400" in status["bad.md"]["error"]
    assert client.retry_failed("docs") == 1
    assert client.document_status("docs", "bad.md")[0]["status"] == "pending"
    provider.poison = "NOTHING-REFUSED"
    run_worker(conn.info.dsn)
    assert client.document_status("docs", "bad.md")[0]["status"] == "ready"
    assert client.retry_failed("docs") == 0


def test_a_worker_without_the_rights_hands_jobs_back(
    client: Client, conn: psycopg.Connection[Any], provider: FakeProvider, dsn: str
) -> None:
    """A worker connected as an application role may claim a job of a KB it writes, but
    not write what indexing builds: it says so, and the job's attempt does not count."""
    remote_kb(client, conn, provider, "docs")
    client.add_text("docs", "a.md", "Some text to index.")
    team = conn.execute(
        "SELECT t.name FROM kb.team t JOIN kb.knowledge_base k ON k.team_id = t.id "
        "WHERE k.name = 'docs'"
    ).fetchone()[0]
    conn.execute("CREATE ROLE app_worker LOGIN")
    conn.execute("SELECT kb.add_team_member(%s, 'app_worker')", (team,))
    conn.execute("ALTER ROLE app_worker SET kb.fake_key = 'test-key'")
    try:
        stats = run_worker(psycopg.conninfo.make_conninfo(dsn, user="app_worker"))
        assert stats.lacking_rights == 1 and stats.failed == stats.done == 0
        job = conn.execute("SELECT status, attempts, last_error FROM kb.job").fetchone()
        assert job[0] == "queued" and job[1] == 0
        assert "the worker connects as app_worker" in job[2] and "permission denied" in job[2]
        assert client.document_status("docs", "a.md")[0]["status"] == "pending"
        run_worker(dsn)  # as the schema's owner
        assert client.document_status("docs", "a.md")[0]["status"] == "ready"
    finally:
        conn.execute("SELECT kb.remove_team_member(%s, 'app_worker')", (team,))
        conn.execute("DROP ROLE app_worker")
