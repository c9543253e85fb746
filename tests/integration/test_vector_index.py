"""The HNSW index: used by the planner, and complete under selective filters."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb

N = 3000


def _fill(conn: psycopg.Connection, dim: int) -> np.ndarray:
    """N synthetic chunks with random unit vectors; 10% tagged category=rare."""
    rng = np.random.default_rng(7)
    vecs = rng.normal(size=(N, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ix = conn.execute("SELECT active_index_id, id FROM kb.knowledge_base").fetchone()
    with conn.transaction():
        conn.execute(
            "INSERT INTO kb.document (kb_id, title, content, content_hash, status) "
            "SELECT %s, 'doc' || i, 'text ' || i, md5(i::text), 'ready' FROM generate_series(0, %s) i",
            (ix[1], N - 1),
        )
        conn.execute(
            "INSERT INTO kb.chunk (index_id, kb_id, document_id, ordinal, content, token_count,"
            " char_start, char_end, metadata, tsv, doc_len) "
            "SELECT %s, d.kb_id, d.id, 0, d.content, 2, 0, 8, jsonb_build_object('category', "
            "CASE WHEN d.id %% 10 = 0 THEN 'rare' ELSE 'common' END), to_tsvector(d.content), 2 "
            "FROM kb.document d ORDER BY d.id",
            (ix[0],),
        )
        ids = [r[0] for r in conn.execute("SELECT id FROM kb.chunk ORDER BY document_id")]
        with conn.cursor().copy(
            "COPY kb.embedding (chunk_id, index_id, kb_id, embedding) FROM STDIN"
        ) as cp:
            for cid, v in zip(ids, vecs, strict=True):
                cp.write_row((cid, ix[0], ix[1], "[" + ",".join(f"{x:.6f}" for x in v) + "]"))
    conn.execute("ANALYZE kb.embedding; ANALYZE kb.chunk")
    return vecs


def test_hnsw_is_used_and_filtered_search_is_complete(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "v")
    _fill(conn, provider.dim)
    q = np.random.default_rng(1).normal(size=provider.dim)
    q = (q / np.linalg.norm(q)).tolist()
    ix = conn.execute("SELECT active_index_id FROM kb.knowledge_base").fetchone()[0]
    qtext = "[" + ",".join(map(str, q)) + "]"
    plan = "\n".join(
        r[0]
        for r in conn.execute(
            f"EXPLAIN SELECT chunk_id FROM kb.embedding e WHERE e.index_id = {ix} "
            f"ORDER BY e.embedding::vector({provider.dim}) <=> %s::vector({provider.dim}) LIMIT 10",
            (qtext,),
        )
    )
    assert f"embedding_hnsw_{ix}" in plan
    # The same query through kb.vector_search: results match exact search closely.
    got = [
        r[0]
        for r in conn.execute("SELECT chunk_id FROM kb.vector_search(%s, %s::real[], 10)", (ix, q))
    ]
    exact = [
        r[0]
        for r in conn.execute(
            "SELECT chunk_id FROM kb.embedding ORDER BY embedding <=> %s::vector LIMIT 10", (qtext,)
        )
    ]
    assert len(set(got) & set(exact)) >= 8
    # A filter keeping 10% of rows still yields top_k rows (iterative scan), all matching.
    rows = conn.execute(
        "SELECT v.chunk_id, c.metadata->>'category' FROM kb.vector_search(%s, %s::real[], 50, "
        '\'{"category": "rare"}\') v JOIN kb.chunk c ON c.id = v.chunk_id',
        (ix, q),
    ).fetchall()
    assert len(rows) == 50
    assert {r[1] for r in rows} == {"rare"}
    exact_rare = [
        r[0]
        for r in conn.execute(
            "SELECT e.chunk_id FROM kb.embedding e JOIN kb.chunk c ON c.id = e.chunk_id "
            'WHERE c.metadata @> \'{"category": "rare"}\' ORDER BY e.embedding <=> %s::vector '
            "LIMIT 50",
            (qtext,),
        )
    ]
    assert len({r[0] for r in rows} & set(exact_rare)) >= 45


def test_dimension_mismatch_is_a_clear_error(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(client, conn, provider, "v")
    ix = conn.execute("SELECT active_index_id FROM kb.knowledge_base").fetchone()[0]
    with pytest.raises(psycopg.errors.DataException, match=r"3 dimensions .* stores 16 dimensions"):
        conn.execute("SELECT * FROM kb.vector_search(%s, '{1,2,3}'::real[], 5)", (ix,))
    with FakeProvider(dim=8) as wrong:
        # The provider starts answering with another dimension than the KB was made for.
        cfg = client.knowledge_base("v")["indexing_config"]
        # A generation's settings never change through kbpg; as superuser, with triggers
        # off (session_replication_role is superuser-only), the test points it elsewhere.
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "UPDATE kb.kb_index SET indexing_config = indexing_config || %s::jsonb",
            ('{"api_base": "' + wrong.url + '/v1"}',),
        )
        conn.execute("RESET session_replication_role")
        client.add_text("v", "a", "some text")
        conn.execute("UPDATE kb.job SET max_attempts = 1")
        from tests.helpers import run_worker

        run_worker(conn.info.dsn)
        doc = client.document_status("v")[0]
        assert doc["status"] == "error"
        assert "8-dimension vectors" in doc["error"] and "16-dimension" in doc["error"]
        assert cfg["embedding_dimensions"] == 16


def test_default_ef_search_follows_the_graph(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    """A new KB's graph is built with ef_construction 256 and searched at ef_search 100 when
    none is given; a graph built with pgvector's defaults (an older KB's) keeps 200."""
    remote_kb(client, conn, provider, "v")
    _fill(conn, provider.dim)
    ix = conn.execute("SELECT active_index_id FROM kb.knowledge_base").fetchone()[0]
    options = conn.execute(
        "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (f"kb.embedding_hnsw_{ix}",)
    ).fetchone()[0]
    assert "ef_construction=256" in options
    assert client.knowledge_base("v")["retrieval_config"]["ef_search"] is None
    assert conn.execute("SELECT kb._hnsw_default_ef(%s)", (ix,)).fetchone()[0] == 100
    q = np.random.default_rng(3).normal(size=provider.dim)
    q = (q / np.linalg.norm(q)).tolist()

    def search(*ef: int) -> list[tuple[int, float]]:
        extra = ", NULL, %s" if ef else ""
        return conn.execute(
            f"SELECT chunk_id, similarity FROM kb.vector_search(%s, %s::real[], 20{extra})",
            (ix, q, *ef),
        ).fetchall()

    assert search() == search(100)
    # The graph an older KB has: pgvector's default build options.
    conn.execute(f"DROP INDEX kb.embedding_hnsw_{ix}")
    conn.execute(
        f"CREATE INDEX embedding_hnsw_{ix} ON kb.embedding USING hnsw "
        f"((embedding::vector({provider.dim})) vector_cosine_ops) WHERE index_id = {ix}"
    )
    assert conn.execute("SELECT kb._hnsw_default_ef(%s)", (ix,)).fetchone()[0] == 200
    assert search() == search(200)
    assert len(search()) == 20
    # An index generation without a graph (dropped by hand): the safer 200, no error.
    assert conn.execute("SELECT kb._hnsw_default_ef(-1)").fetchone()[0] == 200
