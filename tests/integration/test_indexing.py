"""Indexing through the worker: chunkers, files, the local model, providers, failures."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pymupdf
import pytest

from kbpg.client import Client
from kbpg.cluster import Cluster
from tests.fakeprovider import FakeProvider, hashed_vector
from tests.helpers import allow_fake_key, remote_kb, run_worker

MARKDOWN = """# Installation

Install the package with apt. The service starts on boot.

## Configuration

Edit /etc/app.conf to set the port. Restart the service afterwards.

```
# not a heading: a comment in a code block
port = 8080
```

# Usage

Run the client with a query. Results are printed one per line.
"""


def make_pdf(path: Path, pages: list[str], title: str | None = None) -> Path:
    doc = pymupdf.open()
    for text in pages:
        page = doc.new_page()
        page.insert_textbox(pymupdf.Rect(50, 50, 550, 800), text, fontsize=10)
    if title:
        doc.set_metadata({"title": title})
        doc.set_toc([[1, title, 1]])
    doc.save(path)
    return path


def test_local_model_end_to_end(client: Client, conn: psycopg.Connection, tmp_path: Path) -> None:
    """Markdown and PDF files through the worker with the default offline model."""
    (tmp_path / "guide.md").write_text(MARKDOWN)
    make_pdf(
        tmp_path / "manual.pdf",
        [
            "The espresso machine heats water to 93 degrees before each shot. " * 12,
            "Descale the machine every month with citric acid to remove limescale. " * 12,
        ],
        title="Espresso Manual",
    )
    client.create_knowledge_base("local")
    client.add_file("local", tmp_path / "guide.md", metadata={"category": "howto"})
    client.add_file("local", tmp_path / "manual.pdf", metadata={"category": "manual"})
    stats = run_worker(conn.info.dsn)
    assert (stats.done, stats.failed) == (2, 0)
    docs = {d["title"]: d for d in client.document_status("local")}
    assert docs["guide.md"]["status"] == "ready" and docs["guide.md"]["chunk_count"] == 3
    assert docs["guide.md"]["tokens_embedded"] > 0
    chunks = conn.execute(
        "SELECT c.heading_path, c.page, c.char_start, c.char_end, c.content, d.content, c.metadata "
        "FROM kb.chunk c JOIN kb.document d ON d.id = c.document_id ORDER BY d.id, c.ordinal"
    ).fetchall()
    paths = [c[0] for c in chunks]
    assert ["Installation"] in paths and ["Installation", "Configuration"] in paths
    assert ["Usage"] in paths
    for _, _, start, end, content, doc, _ in chunks:
        assert doc[start:end] == content
    pdf_pages = sorted({c[1] for c in chunks if c[6]["category"] == "manual"})
    assert pdf_pages[0] == 1
    assert all(c[6]["file_type"] in ("md", "pdf") for c in chunks)
    pdf_meta = conn.execute(
        "SELECT metadata FROM kb.document WHERE title = 'manual.pdf'"
    ).fetchone()[0]
    assert pdf_meta["pdf_title"] == "Espresso Manual" and pdf_meta["toc"][0]["page"] == 1
    top = client.search("local", "how do I remove limescale?", method="vector", top_k=1)[0]
    assert top.title == "manual.pdf" and top.page == 2
    top = client.search("local", "which port does the service listen on", method="vector", top_k=1)[
        0
    ]
    assert top.heading_path == ["Installation", "Configuration"]
    filtered = client.search("local", "machine", top_k=10, filter={"category": "howto"})
    assert filtered and all(r.metadata["category"] == "howto" for r in filtered)


@pytest.mark.parametrize("chunker", ["markdown_header", "recursive", "fixed_size"])
def test_each_chunker_indexes(
    client: Client, conn: psycopg.Connection, provider: FakeProvider, chunker: str
) -> None:
    remote_kb(client, conn, provider, "c", chunker=chunker, chunk_size=40, chunk_overlap=8)
    client.add_text("c", "guide", MARKDOWN * 3)
    run_worker(conn.info.dsn)
    rows = conn.execute("SELECT token_count, heading_path FROM kb.chunk").fetchall()
    assert len(rows) > 3 and all(0 < t <= 40 for t, _ in rows)
    assert any(h for _, h in rows) == (chunker == "markdown_header")
    preview = conn.execute(
        "SELECT count(*) FROM kb.preview_chunks(%s, %s::jsonb)",
        (MARKDOWN * 3, f'{{"chunker": "{chunker}", "chunk_size": 40, "chunk_overlap": 8}}'),
    ).fetchone()[0]
    assert preview == len(rows)


def test_remote_embeddings_batch_and_retry(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "r", chunk_size=30, chunk_overlap=0, batch_tokens=100)
    client.add_text("r", "long", " ".join(f"word{i}" for i in range(400)))
    provider.fail_next = 2  # two 429s, then success: retried with backoff
    stats = run_worker(conn.info.dsn)
    assert stats.done == 1
    n_chunks = conn.execute("SELECT count(*) FROM kb.chunk").fetchone()[0]
    assert provider.embedding_calls > 1  # split by the token budget
    assert len(provider.embedded_texts) == n_chunks
    doc = client.document_status("r")[0]
    assert doc["status"] == "ready" and doc["tokens_embedded"] > 0


def test_remote_batches_in_flight_at_once(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """A document's batches go to the provider several at a time (embedding_concurrency,
    counted at the server), and every chunk still gets its own text's vector."""
    remote_kb(
        client,
        conn,
        provider,
        "par",
        chunk_size=30,
        chunk_overlap=0,
        batch_size=2,
        embedding_concurrency=3,
    )
    remote_kb(
        client,
        conn,
        provider,
        "seq",
        chunk_size=30,
        chunk_overlap=0,
        batch_size=2,
        embedding_concurrency=1,
    )
    text = " ".join(f"word{i}" for i in range(400))
    provider.embed_delay = 0.5
    client.add_text("par", "long", text)
    run_worker(conn.info.dsn)
    assert provider.embed_max_in_flight == 3
    provider.embed_max_in_flight = 0
    client.add_text("seq", "long", text)
    run_worker(conn.info.dsn)
    assert provider.embed_max_in_flight == 1
    rows = conn.execute(
        "SELECT c.content, e.embedding::real[] FROM kb.chunk c JOIN kb.embedding e "
        "ON e.chunk_id = c.id JOIN kb.knowledge_base k ON k.active_index_id = c.index_id "
        "WHERE k.name = 'par' ORDER BY c.ordinal"
    ).fetchall()
    assert len(rows) > 6  # more batches than in flight at once
    for content, vec in rows:
        want = hashed_vector(content, provider.dim)
        assert max(abs(a - b) for a, b in zip(vec, want, strict=True)) < 1e-5
    assert (
        client.document_status("par")[0]["tokens_embedded"]
        == client.document_status("seq")[0]["tokens_embedded"]
    )


def test_small_documents_share_requests(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """A worker thread claims several jobs and embeds their chunks together: 30 one-chunk
    documents are 2 requests, not 30 (counted at the server), with every document's
    vectors its own and the tokens the provider counted shared out among them."""
    remote_kb(client, conn, provider, "many", batch_size=64)
    for i in range(30):
        client.add_text("many", f"note{i}", f"short note number {i} about topic{i % 7}")
    stats = run_worker(conn.info.dsn, batch=16)
    assert stats.done == 30
    assert provider.embedding_calls == 2  # claims of 16 and 14 documents
    assert len(provider.embedded_texts) == 30  # nothing embedded twice
    rows = conn.execute(
        "SELECT c.content, e.embedding::real[] FROM kb.chunk c JOIN kb.embedding e "
        "ON e.chunk_id = c.id"
    ).fetchall()
    assert len(rows) == 30
    for content, vec in rows:
        want = hashed_vector(content, provider.dim)
        assert max(abs(a - b) for a, b in zip(vec, want, strict=True)) < 1e-5
    docs = client.document_status("many")
    assert all(d["status"] == "ready" and d["tokens_embedded"] > 0 for d in docs)
    spent = sum(len(t.split()) for t in provider.embedded_texts)  # the fake's token count
    assert abs(sum(d["tokens_embedded"] for d in docs) - spent) <= len(docs)
    # One by one (batch 1), each document is a request of its own.
    provider.embedding_calls = 0
    client.add_text("many", "extra1", "one more note")
    client.add_text("many", "extra2", "and another note")
    run_worker(conn.info.dsn, batch=1)
    assert provider.embedding_calls == 2


def test_jobs_claimed_together_keep_their_leases(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """Jobs waiting their turn in a worker's claim are renewed, and only their worker can
    embed ahead for them or renew them."""
    remote_kb(client, conn, provider, "lease")
    for i in range(3):
        client.add_text("lease", f"d{i}", f"document {i}")
    rows = conn.execute("SELECT kb_id, id FROM kb.claim_jobs('w1', 3, 2)").fetchall()
    assert len(rows) == 3
    kb_id, ids = rows[0][0], [r[1] for r in rows]
    conn.execute("SET kb.fake_key = 'test-key'")
    prefetch = "SELECT kb.prefetch_embeddings(%s, %s, %s)"
    assert conn.execute(prefetch, (kb_id, ids, "w2")).fetchone()[0] == 0
    assert conn.execute(prefetch, (kb_id + 1, ids, "w1")).fetchone()[0] == 0  # another KB's
    assert provider.embedding_calls == 0
    provider.embed_delay = 2.5  # embedding ahead outlasts the 2 s leases
    assert conn.execute(prefetch, (kb_id, ids, "w1")).fetchone()[0] == 3
    assert provider.embedding_calls == 1
    # Their leases start again when it ends, not when it started.
    assert conn.execute("SELECT count(*) FROM kb.claim_jobs('w2', 3, 2)").fetchone()[0] == 0
    time.sleep(1.2)
    renew = "SELECT kb.renew_leases(%s, %s, %s)"
    assert conn.execute(renew, (kb_id, ids, "w1")).fetchone()[0] == 3
    assert conn.execute(renew, (kb_id, ids, "w2")).fetchone()[0] == 0
    assert conn.execute(renew, (kb_id + 1, ids, "w1")).fetchone()[0] == 0
    time.sleep(1.2)  # past the first lease, within the renewed one
    assert conn.execute("SELECT count(*) FROM kb.claim_jobs('w2', 3, 2)").fetchone()[0] == 0
    # The vectors embedded ahead are this connection's: its jobs use them, no new request.
    for job_id in ids:
        assert (
            conn.execute("SELECT kb.process_job(%s, %s, 'w1')::text", (kb_id, job_id)).fetchone()[0]
            == "done"
        )
    assert provider.embedding_calls == 1


def test_batched_documents_go_out_several_requests_at_once(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """Documents embedded together still split into batch_size requests, up to
    embedding_concurrency of them in flight; a poisoned document in the batch fails
    alone (its own job reports it), the others are indexed. The request that carried it
    loses only its own texts: the other requests' vectors serve their jobs."""
    remote_kb(client, conn, provider, "fan", batch_size=3, embedding_concurrency=3)
    conn.execute("ALTER DATABASE " + conn.info.dbname + " SET kb.max_attempts = 1")
    client.conn.execute("SET kb.max_attempts = 1")
    provider.embed_delay = 0.5
    for i in range(12):
        client.add_text("fan", f"d{i}", f"document {i} text")
        if i == 5:  # the third request: bad, d6, d7
            client.add_text("fan", "bad", "this one is POISON")
    stats = run_worker(conn.info.dsn, batch=20)
    assert stats.done == 12 and stats.failed == 1
    assert provider.embed_max_in_flight == 3
    # Each good chunk was embedded once: 9 ahead, d6 and d7 by their own jobs.
    assert len(provider.embedded_texts) == 12 == len(set(provider.embedded_texts))
    assert provider.embedding_calls == 4 + 2
    docs = {d["title"]: d for d in client.document_status("fan")}
    assert docs["bad"]["status"] == "error" and "poison" in docs["bad"]["error"]
    assert all(docs[f"d{i}"]["status"] == "ready" for i in range(12))


def test_api_key_is_required_and_never_stored(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    from tests.helpers import remote_config

    client.create_knowledge_base("nokey", remote_config(provider))
    client.add_text("nokey", "a", "text")
    conn.execute("UPDATE kb.job SET max_attempts = 1")
    run_worker(conn.info.dsn)
    doc = client.document_status("nokey")[0]
    assert doc["status"] == "error" and "key" in doc["error"].lower()
    allow_fake_key(conn)
    stored = conn.execute(
        "SELECT count(*) FROM kb.knowledge_base WHERE indexing_config::text LIKE '%test-key%'"
    ).fetchone()[0]
    assert stored == 0


def test_poison_document_retries_then_errors(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "p")
    conn.execute("UPDATE kb.job SET max_attempts = 3")  # none yet; set the default instead
    conn.execute("ALTER DATABASE " + conn.info.dbname + " SET kb.max_attempts = 3")
    client.conn.execute("SET kb.max_attempts = 3")
    client.add_text("p", "bad", "this text is POISON for the provider")
    for i in range(5):
        client.add_text("p", f"good{i}", f"healthy document number {i}")
    stats = run_worker(conn.info.dsn, concurrency=2)
    assert stats.done == 5 and stats.failed == 1 and stats.retried == 2
    docs = {d["title"]: d for d in client.document_status("p")}
    assert docs["bad"]["status"] == "error"
    assert "poison" in docs["bad"]["error"] and docs["bad"]["attempts"] == 3
    assert all(docs[f"good{i}"]["status"] == "ready" for i in range(5))
    job = conn.execute(
        "SELECT j.status, j.attempts, j.last_error FROM kb.job j JOIN kb.document d "
        "ON d.id = j.document_id WHERE d.title = 'bad'"
    ).fetchone()
    assert job[0] == "failed" and job[1] == 3 and "poison" in job[2]


def test_worker_sizes_itself_by_the_servers_cores(
    client: Client, conn: psycopg.Connection, dsn: str
) -> None:
    from kbpg.worker import AUTO_MAX_CONNECTIONS, Worker

    cpus = conn.execute("SELECT kb.server_cpu_count()").fetchone()[0]
    assert cpus >= 1
    worker = Worker(dsn, once=True, poll_interval=0.1)
    worker._size()
    assert worker.concurrency == min(AUTO_MAX_CONNECTIONS, cpus)
    probe = "SELECT current_setting('kb.onnx_threads', true), current_setting('synchronous_commit')"
    # The test cluster's configuration sets kb.onnx_threads = 1: it stands. A job's commit
    # does not wait for the disk unless asked to.
    with worker._connect() as c:
        assert c.execute(probe).fetchone() == ("1", "off")
    # Durable commits leave synchronous_commit as the server has it.
    server = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()[0]
    asked = Worker(dsn, once=True, concurrency=1, model_threads=2, durable_commits=True)
    asked._size()
    with asked._connect() as c:
        assert c.execute(probe).fetchone() == ("2", server)
    # Sized by itself, it drains a queue like any other.
    client.create_knowledge_base("sized")
    for i in range(6):
        client.add_text("sized", f"d{i}", f"document number {i} about sizing")
    stats = worker.run()
    assert stats.done == 6 and stats.failed == 0
    assert {d["status"] for d in client.document_status("sized")} == {"ready"}


def test_claims_never_overlap(client: Client, conn: psycopg.Connection, dsn: str) -> None:
    client.create_knowledge_base("q")
    for i in range(20):
        client.add_text("q", f"d{i}", f"text {i}")
    barrier = threading.Barrier(2)
    claimed: list[list[int]] = [[], []]

    def claim(i: int) -> None:
        with psycopg.connect(dsn) as c:
            barrier.wait()
            while True:
                with c.transaction():
                    rows = c.execute("SELECT id FROM kb.claim_jobs(%s, 3)", (f"w{i}",)).fetchall()
                if not rows:
                    return
                claimed[i].extend(r[0] for r in rows)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not set(claimed[0]) & set(claimed[1])
    assert len(claimed[0]) + len(claimed[1]) == 20


def test_the_end_of_a_queue_goes_largest_first(client: Client, conn: psycopg.Connection) -> None:
    """Oldest first while more than 64 jobs are due; then the largest documents first (a
    file not converted yet among them), so the connections finish together."""
    client.create_knowledge_base("lpt")
    for i in range(66):
        client.add_text("lpt", f"d{i:02}", "word " * (1 + i % 7))
    # Converted by its job: no text yet.
    conn.execute("SELECT kb.add_file('lpt', 'notes.html', %s)", (b"<p>short</p>",))

    def claim(n: int) -> list[str]:
        with conn.transaction():
            rows = conn.execute(
                "SELECT d.title FROM kb.claim_jobs('w', %s) j "
                "JOIN kb.document d ON d.kb_id = j.kb_id AND d.id = j.document_id "
                "ORDER BY j.id", (n,),
            ).fetchall()  # fmt: skip
        return [r[0] for r in rows]

    assert claim(3) == ["d00", "d01", "d02"]  # 67 due: oldest first
    assert claim(1) == ["notes.html"]  # 64 due: the file, then the longest texts
    assert claim(9) == [f"d{i:02}" for i in range(6, 66, 7)]  # seven words each
    assert claim(9) == [f"d{i:02}" for i in range(5, 66, 7)]  # then six


def test_a_claim_takes_one_knowledge_base_s_jobs(
    client: Client, conn: psycopg.Connection, dsn: str
) -> None:
    """A claim's jobs are one KB's (each statement of a job reads one KB's rows): the KB
    whose job has waited longest first; when another worker holds all of that KB's due
    jobs, the next KB's."""
    for name in ("older", "newer"):
        client.create_knowledge_base(name)
    for i in range(3):
        client.add_text("older", f"d{i}", f"text {i}")
    for i in range(2):
        client.add_text("newer", f"d{i}", f"text {i}")
    kb_of = dict(conn.execute("SELECT name, id FROM kb.knowledge_base").fetchall())
    with psycopg.connect(dsn) as other:
        with other.transaction(force_rollback=True):
            first = other.execute("SELECT kb_id, id FROM kb.claim_jobs('w1', 2)").fetchall()
            assert {r[0] for r in first} == {kb_of["older"]} and len(first) == 2
            # w1's claim is not committed: its rows stay locked, and the older KB's third
            # job is still due, so that KB is taken again first.
            second = conn.execute("SELECT kb_id FROM kb.claim_jobs('w2', 5)").fetchall()
            assert [r[0] for r in second] == [kb_of["older"]]
            # Every due job of the older KB is held now: the next claim takes the newer KB's.
            third = conn.execute("SELECT kb_id FROM kb.claim_jobs('w3', 5)").fetchall()
            assert [r[0] for r in third] == [kb_of["newer"]] * 2
    # w1's claim rolled back: its two jobs are due again.
    assert conn.execute("SELECT count(*) FROM kb.claim_jobs('w4', 5)").fetchone()[0] == 2
    # A job is addressed by its KB and its id: the wrong KB finds nothing.
    job = conn.execute(
        "SELECT kb_id, id FROM kb.job WHERE locked_by = 'w3' ORDER BY id LIMIT 1"
    ).fetchone()
    wrong = kb_of["older"] if job[0] == kb_of["newer"] else kb_of["newer"]
    assert (
        conn.execute("SELECT kb.process_job(%s, %s, 'w3')::text", (wrong, job[1])).fetchone()[0]
        == "lost"
    )
    assert (
        conn.execute("SELECT kb.release_job(%s, %s, 'w3')", (wrong, job[1])).fetchone()[0] is None
    )
    assert (
        conn.execute("SELECT kb.fail_job(%s, %s, 'w3', 'x')", (wrong, job[1])).fetchone()[0]
        == "lost"
    )
    assert conn.execute("SELECT kb.release_job(%s, %s, 'w3')", job).fetchone()[0] is True


def test_four_workers_index_each_document_once(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "many", batch_size=64)
    with conn.transaction():
        conn.execute(
            "SELECT kb.add_document('many', 'doc' || i, 'document number ' || i || ' about topic '"
            " || (i % 17)) FROM generate_series(1, 500) i"
        )
    stats = run_worker(conn.info.dsn, concurrency=4)
    assert stats.done == 500 and stats.failed == 0
    assert len(provider.embedded_texts) == 500  # one embedding per chunk, none twice
    assert len(set(provider.embedded_texts)) == 500
    assert conn.execute("SELECT count(*) FROM kb.chunk").fetchone()[0] == 500
    assert (
        conn.execute("SELECT count(*) FROM kb.document WHERE status = 'ready'").fetchone()[0] == 500
    )


def _spawn_worker(dsn: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "kbpg.cli", "--dsn", dsn, "worker", "--poll", "0.2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _wait(predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_sigkilled_worker_loses_nothing(
    client: Client, conn: psycopg.Connection, dsn: str, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "k", chunk_size=30, chunk_overlap=0, batch_size=1)
    client.add_text("k", "first", "An old version that serves while the new one is built.")
    run_worker(dsn)
    old_chunks = conn.execute("SELECT array_agg(id ORDER BY id) FROM kb.chunk").fetchone()[0]
    client.add_text("k", "first", " ".join(f"token{i}" for i in range(600)))
    proc = _spawn_worker(dsn, "--lease", "2")
    _wait(lambda: conn.execute("SELECT status FROM kb.job WHERE status = 'running'").fetchone())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Meanwhile searches see the complete old version, never a mix.
    ids = conn.execute("SELECT array_agg(id ORDER BY id) FROM kb.chunk").fetchone()[0]
    assert ids in (old_chunks, None) or len(ids) > len(old_chunks)
    run_worker(dsn)  # a fresh worker finishes whatever the dead one left
    doc = client.document_status("k")[0]
    assert doc["status"] == "ready"
    rows = conn.execute("SELECT ordinal FROM kb.chunk ORDER BY ordinal").fetchall()
    assert [r[0] for r in rows] == list(range(len(rows)))  # no loss, no duplicates
    assert conn.execute("SELECT count(*) FROM kb.embedding").fetchone()[0] == len(rows)


def test_worker_graceful_stop_on_sigterm(dsn: str, client: Client) -> None:
    client.create_knowledge_base("s")
    proc = _spawn_worker(dsn)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert b"worker stopped" in out


def test_server_restart_during_ingestion(
    cluster: Cluster, client: Client, dsn: str, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "crash", batch_size=1)
    with conn.transaction():
        conn.execute(
            "SELECT kb.add_document('crash', 'doc' || i, repeat('words and more words ', 50)"
            " || i) FROM generate_series(1, 40) i"
        )
    proc = _spawn_worker(dsn, "--concurrency", "2", "--lease", "3")
    _wait(
        lambda: (
            conn.execute("SELECT count(*) FROM kb.document WHERE status = 'ready'").fetchone()[0]
            >= 2
        )
    )
    cluster.stop("immediate")
    time.sleep(1)
    cluster.start()
    with psycopg.connect(dsn, autocommit=True) as c2:
        _wait(
            lambda: (
                c2.execute(
                    "SELECT count(*) FROM kb.document WHERE status IN ('ready', 'error')"
                ).fetchone()[0]
                == 40
            ),
            timeout=120,
        )
        stuck = c2.execute(
            "SELECT count(*) FROM kb.document WHERE status IN ('pending', 'indexing')"
        ).fetchone()[0]
        assert stuck == 0
        assert (
            c2.execute("SELECT count(*) FROM kb.document WHERE status = 'ready'").fetchone()[0]
            == 40
        )
        assert (
            c2.execute("SELECT count(*) FROM kb.chunk").fetchone()[0]
            == c2.execute("SELECT sum(chunk_count) FROM kb.document").fetchone()[0]
        )
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert b"connection lost" in out or b"reconnect" in out


def test_reindex_knowledge_base_switches_atomically(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "re", chunk_size=64)
    for i in range(5):
        client.add_text("re", f"d{i}", f"document {i} about cats and dogs " * 10)
    run_worker(conn.info.dsn)
    before = {r.chunk_id for r in client.search("re", "cats", top_k=50)}
    with FakeProvider(dim=24) as bigger:
        new_cfg = {
            **client.knowledge_base("re")["indexing_config"],
            "chunk_size": 32,
            "embedding_dimensions": 24,
            "api_base": bigger.url + "/v1",
        }
        new_ix = client.reindex_knowledge_base("re", new_cfg)
        # Until the new generation is complete, searches use the old one.
        assert {r.chunk_id for r in client.search("re", "cats", top_k=50)} == before
        assert client.knowledge_base("re")["embedding_dim"] == 16
        run_worker(conn.info.dsn)
        kb = client.knowledge_base("re")
        assert (kb["active_index_id"], kb["embedding_dim"]) == (new_ix, 24)
        after = client.search("re", "cats", top_k=50)
        assert after and not {r.chunk_id for r in after} & before
        assert conn.execute("SELECT count(*) FROM kb.kb_index").fetchone()[0] == 1
        assert all(d["status"] == "ready" for d in client.document_status("re"))


def test_failed_reindex_keeps_the_old_generation(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "re")
    client.add_text("re", "a", "cats and dogs")
    run_worker(conn.info.dsn)
    conn.execute(f"ALTER DATABASE {conn.info.dbname} SET kb.max_attempts = 1")
    bad = {
        **client.knowledge_base("re")["indexing_config"],
        "api_base": "http://127.0.0.1:9/v1",
        "max_retries": 0,
        "request_timeout_s": 2,
    }
    new_ix = client.reindex_knowledge_base("re", bad)
    client.conn.execute("SET kb.max_attempts = 1")
    run_worker(conn.info.dsn)
    status, error = conn.execute(
        "SELECT status, error FROM kb.kb_index WHERE id = %s", (new_ix,)
    ).fetchone()
    assert status == "failed" and error
    # The failed generation's data is gone; its row keeps the error.
    left = conn.execute("SELECT count(*) FROM kb.chunk WHERE index_id = %s", (new_ix,)).fetchone()[
        0
    ]
    assert left == 0
    assert not conn.execute(
        "SELECT 1 FROM pg_indexes WHERE indexname = %s", (f"embedding_hnsw_{new_ix}",)
    ).fetchone()
    assert client.search("re", "cats", top_k=1)[0].title == "a"
    assert client.document_status("re")[0]["status"] == "ready"


def test_token_and_cost_accounting(client: Client, conn: psycopg.Connection) -> None:
    """A model litellm prices: cost per document and per KB come from its price map."""
    with FakeProvider(dim=1536) as p:
        allow_fake_key(conn)
        client.create_knowledge_base(
            "cost",
            {
                "embedding_model": "openai/text-embedding-3-small",
                "api_base": p.url + "/v1",
                "api_key_name": "FAKE_KEY",
            },
        )
        client.conn.execute("SET kb.fake_key = 'test-key'")
        client.add_text("cost", "a", "one two three four five six seven eight")
        client.add_text("cost", "b", "nine ten eleven")
        run_worker(conn.info.dsn)
    docs = {d["title"]: d for d in client.document_status("cost")}
    assert docs["a"]["tokens_embedded"] == 8 and docs["b"]["tokens_embedded"] == 3
    assert docs["a"]["embedding_cost_usd"] > 0
    usage = conn.execute(
        "SELECT tokens_embedded, embedding_cost_usd FROM kb.knowledge_base_usage WHERE kb = 'cost'"
    ).fetchone()
    assert usage[0] == 11
    assert usage[1] == docs["a"]["embedding_cost_usd"] + docs["b"]["embedding_cost_usd"]


def test_async_client(dsn: str, provider: FakeProvider, conn: psycopg.Connection) -> None:
    import asyncio

    from kbpg.client import AsyncClient
    from tests.helpers import remote_config

    allow_fake_key(conn)

    async def scenario() -> None:
        client = await AsyncClient.connect(dsn)
        async with client:
            await client.create_knowledge_base("async", remote_config(provider))
            added = await client.add_text(
                "async", "tea", "Green tea is brewed at 80 degrees.", metadata={"category": "food"}
            )
            assert added.action == "added"
            await asyncio.to_thread(run_worker, dsn)
            rows = await client.search(
                "async", "green tea", method="full_text", filter={"category": "food"}
            )
            assert rows[0].title == "tea"
            status = await client.document_status("async")
            assert status[0]["status"] == "ready"
            names = [k["name"] for k in await client.list_knowledge_bases()]
            assert names == ["async"]

    asyncio.run(scenario())


@pytest.mark.parametrize("chunker", ["recursive", "fixed_size"])
def test_folder_and_pdf_with_other_chunkers(
    client: Client, conn: psycopg.Connection, tmp_path: Path, chunker: str
) -> None:
    """A Markdown folder and a PDF through the worker with the local model, per chunker."""
    from kbpg.loaders import discover, load_file

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(MARKDOWN * 4)
    make_pdf(
        docs / "manual.pdf",
        [
            "The espresso machine heats water to 93 degrees before each shot. " * 12,
            "Descale the machine every month with citric acid to remove limescale. " * 12,
        ],
    )
    client.create_knowledge_base("k", {"chunker": chunker, "chunk_size": 64, "chunk_overlap": 8})
    for path, root in discover([docs]):
        client.put("k", load_file(path, root=root))
    assert run_worker(conn.info.dsn).done == 2
    rows = conn.execute(
        "SELECT c.char_start, c.char_end, c.content, d.content, c.page, c.token_count, d.title "
        "FROM kb.chunk c JOIN kb.document d ON d.id = c.document_id"
    ).fetchall()
    assert len(rows) > 6
    for start, end, content, doc, _, tokens, _ in rows:
        assert doc[start:end] == content and 0 < tokens <= 64
    assert {r[4] for r in rows if r[6] == "manual.pdf"} == {1, 2}
    assert {r[4] for r in rows if r[6] == "guide.md"} == {None}
    top = client.search("k", "how do I remove limescale?", method="vector", top_k=1)[0]
    assert (top.title, top.page) == ("manual.pdf", 2)
