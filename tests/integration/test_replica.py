"""Reads from a hot standby: a streaming replica (pg_basebackup -R) of the test cluster
serves every read path — search in each method, explain, build_context, the BM25 and
vector building blocks, chunk previews, test-set scoring, the lab's listings — with the
same results as the primary where the documents were indexed. Nothing on the query path
writes (a standby refuses any write)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from kbpg.client import Client
from kbpg.cluster import Cluster
from tests.fakeprovider import FakeProvider
from tests.helpers import run_worker
from tests.integration.test_tree_search import two_docs

DOCS = {
    "Refunds": "# Refunds\n\nCustomers get their money back within 14 days of a return.\n",
    "Shipping": "# Shipping\n\nParcels leave the Rotterdam warehouse within two business days.\n",
    "Leave": "# Annual leave\n\nEmployees take 28 days of paid leave a year.\n",
}

# Every read an application or the lab makes, as (name, SQL); %(kb)s is the KB's name.
READS = [
    (
        "hybrid",
        "SELECT chunk_id, title, round(score::numeric, 9) FROM kb.search(%(kb)s, 'paid leave days')",
    ),
    (
        "vector",
        "SELECT chunk_id, round(score::numeric, 9) FROM kb.search(%(kb)s, 'money back', method => 'vector')",
    ),
    (
        "full_text",
        "SELECT chunk_id, round(score::numeric, 9) FROM kb.search(%(kb)s, "
        "'Rotterdam warehouse', method => 'full_text')",
    ),
    ("filtered", "SELECT chunk_id FROM kb.search(%(kb)s, 'leave', filter => '{\"team\": \"hr\"}')"),
    (
        "explain",
        "SELECT final_rank, chunk_id, vector_rank, bm25_rank, round(fused_score::numeric, 9) "
        "FROM kb.explain_search(%(kb)s, 'refund within days')",
    ),
    (
        "context",
        "SELECT context, has_relevant, sources FROM kb.build_context(%(kb)s, 'how long do refunds take')",
    ),
    (
        "bm25",
        "SELECT chunk_id, round(score::numeric, 9) FROM kb.bm25_search("
        "(SELECT active_index_id FROM kb.knowledge_base WHERE name = %(kb)s), 'parcels days', 5)",
    ),
    ("embed", "SELECT kb.embed_query(%(kb)s, 'paid leave')::text"),
    ("preview", "SELECT ordinal, content FROM kb.preview_chunks('# A\n\nOne. Two.', '{}')"),
    ("score", "SELECT kb.score_query(%(kb)s, 'paid leave', ARRAY['Leave'])::text"),
    ("run set", "SELECT kb.run_test_set(%(kb)s, 'smoke', save => false)->'metrics'"),
    ("test sets", "SELECT name, queries FROM kb.test_sets(%(kb)s)"),
    ("list", "SELECT name, documents, chunks FROM kb.list_knowledge_bases()"),
    ("status", "SELECT title, status, chunk_count FROM kb.document_status ORDER BY title"),
    ("queue", "SELECT kb, done FROM kb.queue_status()"),
    # Tree Search over a PageIndex KB: two LLM phases (the scripted server), cache only read.
    ("tree_search", "SELECT title, heading_path FROM kb.search('ts', 'how are refunds paid?')"),
    ("tree_search rows", "SELECT node_id, title_path FROM kb.tree_search('ts', 'partial refunds')"),
]


@pytest.fixture
def replica(cluster: Cluster) -> Iterator[Cluster]:
    home = Path(tempfile.mkdtemp(prefix="kbpg-replica-", dir="/tmp"))
    home.chmod(0o755)
    standby = Cluster(home / "standby", settings={"kb.onnx_threads": "'1'", "hot_standby": "on"})
    try:
        standby.replicate(cluster)
        standby.start()
        yield standby
    finally:
        standby.stop("immediate")
        if not os.environ.get("KBPG_KEEP"):
            shutil.rmtree(home, ignore_errors=True)


def _caught_up(primary: psycopg.Connection, standby_dsn: str, timeout: float = 60) -> None:
    # The insert position: with synchronous_commit off, the write position can lag it.
    target = primary.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    deadline = time.monotonic() + timeout
    with psycopg.connect(standby_dsn, autocommit=True) as s:
        while time.monotonic() < deadline:
            done = s.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()
            if done and done[0]:
                return
            time.sleep(0.1)
    raise AssertionError("the standby did not catch up")


def test_every_read_path_runs_on_a_hot_standby(
    cluster: Cluster,
    client: Client,
    conn: psycopg.Connection,
    replica: Cluster,
    provider: FakeProvider,
) -> None:
    two_docs(client, conn, provider)  # the PageIndex KB "ts"
    client.create_knowledge_base("rep")
    for title, text in DOCS.items():
        client.add_text("rep", title, text, metadata={"team": "hr" if title == "Leave" else "ops"})
    run_worker(conn.info.dsn)
    conn.execute("SELECT kb.create_test_set('rep', 'smoke')")
    conn.execute("SELECT kb.add_test_query('rep', 'smoke', 'paid leave', ARRAY['Leave'])")
    db = conn.execute("SELECT current_database()").fetchone()[0]
    standby_dsn = replica.dsn(db)
    _caught_up(conn, standby_dsn)

    def read_all(c: psycopg.Connection) -> dict[str, Any]:
        c.execute("SET kb.fake_key = 'test-key'")
        return {name: c.execute(sql, {"kb": "rep"}).fetchall() for name, sql in READS}

    with psycopg.connect(standby_dsn, autocommit=True) as s:
        assert s.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        on_standby = read_all(s)
        # The standby is read-only: a write is refused there, so none of the above wrote.
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            s.execute("SELECT kb.add_document('rep', 'x', 'y')")
        # The Python client reads from it like from the primary.
        with Client(standby_dsn) as reader:
            hits = reader.search("rep", "Rotterdam parcels")
            assert hits and hits[0].title == "Shipping"
    on_primary = read_all(conn)
    for name, _ in READS:
        assert on_standby[name] == on_primary[name], name
    assert on_primary["hybrid"][0][1] == "Leave"
    assert on_primary["tree_search"][0] == ("billing", ["Refunds"])
    assert on_primary["filtered"] and len(on_primary["filtered"]) == 1

    # New writes on the primary reach the standby's searches.
    client.add_text("rep", "Pets", "# Pets\n\nThe office dog is called Pixel.\n")
    run_worker(conn.info.dsn)
    _caught_up(conn, standby_dsn)
    with Client(standby_dsn) as reader:
        got = reader.search("rep", "office dog name")
        assert [(r.rank, r.title) for r in got][:1] == [(1, "Pets")]
        assert all(r.title for r in got)
