"""Helpers every group shares: output, latency percentiles, the SciFact data and the synthetic corpora built from it."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kbpg.db import scalar
from kbpg.resources import CHECKOUT as REPO_ROOT

SCIFACT = REPO_ROOT / "data" / "beir" / "scifact"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def lat(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"p50_ms": round(pct(ms, 50), 2), "p95_ms": round(pct(ms, 95), 2), "n": len(ms)}


def scifact_dir() -> Path:
    env = os.environ.get("KBPG_SCIFACT")
    return Path(env) if env else SCIFACT


def ts_rank_cd_run(conn: Any, kb: str, query: str, k: int) -> list[str]:
    """The usual recipe: GIN match on an OR tsquery of the query's words, ts_rank_cd order."""
    rows = conn.execute(
        "WITH q AS (SELECT to_tsquery('english', string_agg(quote_literal(lexeme), ' | ')) AS q "
        "           FROM unnest(to_tsvector('english', %s))) "
        "SELECT d.title FROM kb.chunk c JOIN kb.document d ON d.id = c.document_id, q "
        "JOIN kb.knowledge_base k ON k.name = %s "
        "WHERE c.index_id = k.active_index_id AND c.tsv @@ q.q "
        "ORDER BY ts_rank_cd(c.tsv, q.q) DESC, c.id LIMIT %s",
        (query, kb, k),
    ).fetchall()
    seen: dict[str, None] = {}
    for (title,) in rows:
        seen.setdefault(title, None)
    return list(seen)


def scifact_sentences(limit: int | None = None) -> list[str]:
    sentences: list[str] = []
    with (scifact_dir() / "corpus.jsonl").open() as f:
        for line in f:
            d = json.loads(line)
            sentences.extend(
                s.strip() for s in re.split(r"(?<=[.!?])\s+", d["text"]) if len(s) > 20
            )
            if limit and len(sentences) >= limit:
                break
    return sentences


def copy_chunks(conn: Any, kb_id: int, ix: int, texts: list[str], start: int = 0) -> None:
    """``texts`` as ready documents of one chunk each, written directly (COPY; BM25's
    postings and statistics follow by trigger): no worker, no vectors. Metadata:
    category rare (every 10th document) or common, half 0 or 1."""
    with conn.cursor().copy(
        "COPY kb.document (kb_id, title, content, content_hash, status, chunk_count) FROM STDIN"
    ) as cp:
        for i, t in enumerate(texts):
            cp.write_row((kb_id, f"syn{start + i}", t, f"h{start + i}", "ready", 1))
    conn.execute(
        "INSERT INTO kb.chunk (index_id, kb_id, document_id, ordinal, content, token_count, "
        "char_start, char_end, metadata, tsv, doc_len) "
        "SELECT %s, d.kb_id, d.id, 0, d.content, 0, 0, length(d.content), "
        "jsonb_build_object('category', CASE WHEN d.id %% 10 = 0 THEN 'rare' ELSE 'common' END, "
        "'half', d.id %% 2), "
        "to_tsvector('english', d.content), kb.tsvector_length(to_tsvector('english', d.content)) "
        "FROM kb.document d WHERE d.kb_id = %s AND NOT EXISTS "
        "(SELECT 1 FROM kb.chunk c WHERE c.document_id = d.id)",
        (ix, kb_id),
    )


def build_synthetic_kb(
    conn: Any, name: str, n_chunks: int, dim: int = 384, with_vectors: bool = True, seed: int = 0
) -> int:
    """A KB of ``n_chunks`` chunks made by recombining SciFact sentences (3 random ones
    each), with synthetic unit vectors (64 topics in a 48-d latent space projected to
    ``dim``) standing in for embeddings. 10% of chunks carry category=rare. Reused when
    already built."""
    row = conn.execute(
        "SELECT k.active_index_id, i.n_chunks FROM kb.knowledge_base k JOIN kb.kb_index i "
        "ON i.id = k.active_index_id WHERE k.name = %s",
        (name,),
    ).fetchone()
    if row and row[1] == n_chunks:
        return int(row[0])
    if row:
        conn.execute("SELECT kb.drop_knowledge_base(%s)", (name,))
    conn.execute("SELECT kb.create_knowledge_base(%s)", (name,))
    ix, kb_id = conn.execute(
        "SELECT active_index_id, id FROM kb.knowledge_base WHERE name = %s", (name,)
    ).fetchone()
    # Bulk load without the HNSW index, then build it once (much faster than inserting).
    indexdef = scalar(
        conn,
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'kb' AND indexname = %s",
        (f"embedding_hnsw_{ix}",),
    )
    conn.execute(f"DROP INDEX kb.embedding_hnsw_{ix}")
    rng = np.random.default_rng(seed)
    sentences = scifact_sentences()
    # Sentence embeddings live near a low-dimensional subspace; so do these: 64 topic
    # centres in a 48-d latent space, projected to ``dim`` with a little isotropic noise.
    basis = (rng.normal(size=(48, dim)) / np.sqrt(48)).astype(np.float32)
    centers = rng.normal(size=(64, 48)).astype(np.float32)
    batch = 20_000
    t0 = time.monotonic()
    for start in range(0, n_chunks, batch):
        n = min(batch, n_chunks - start)
        picks = rng.integers(0, len(sentences), size=(n, 3))
        texts = [" ".join(sentences[j] for j in row) for row in picks]
        with conn.transaction():
            copy_chunks(conn, kb_id, ix, texts, start)
            if with_vectors:
                ids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT c.id FROM kb.chunk c LEFT JOIN kb.embedding e ON e.chunk_id = c.id "
                        "WHERE c.index_id = %s AND e.chunk_id IS NULL ORDER BY c.id",
                        (ix,),
                    )
                ]
                latent = centers[rng.integers(0, 64, size=len(ids))] + 0.7 * rng.normal(
                    size=(len(ids), 48)
                ).astype(np.float32)
                vec = latent @ basis + 0.02 * rng.normal(size=(len(ids), dim)).astype(np.float32)
                vec /= np.linalg.norm(vec, axis=1, keepdims=True)
                with conn.cursor().copy(
                    "COPY kb.embedding (chunk_id, index_id, kb_id, embedding) FROM STDIN"
                ) as cp:
                    for cid, v in zip(ids, vec, strict=True):
                        cp.write_row((cid, ix, kb_id, "[" + ",".join(f"{x:.5f}" for x in v) + "]"))
        say(f"  {name}: {start + n}/{n_chunks} chunks ({time.monotonic() - t0:.0f}s)")
    t1 = time.monotonic()
    # The HNSW graph is built fastest in memory: 1M 384-d vectors need about 3 GB.
    conn.execute(f"SET maintenance_work_mem = '{'4GB' if n_chunks > 300_000 else '1GB'}'")
    conn.execute(indexdef)
    say(f"  {name}: HNSW index built in {time.monotonic() - t1:.0f}s")
    conn.execute("VACUUM ANALYZE kb.posting")
    conn.execute("VACUUM ANALYZE kb.chunk")
    conn.execute("VACUUM ANALYZE kb.embedding")
    return int(ix)


def bench_queries(n: int) -> list[str]:
    from kbpg.evaluate import load_beir

    return list(load_beir(scifact_dir(), "test").queries.values())[:n]


def fresh_search_conn(dsn: str) -> Any:
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SELECT kb.embed_query((SELECT name FROM kb.knowledge_base LIMIT 1), 'warm up')")
    return conn


def search_latency(dsn: str, kb: str, queries: list[str]) -> dict[str, Any]:
    """p50/p95 of kb.search per method, and of the parts of a hybrid query on their own."""
    conn = fresh_search_conn(dsn)
    ix = scalar(conn, "SELECT active_index_id FROM kb.knowledge_base WHERE name = %s", (kb,))
    out: dict[str, Any] = {
        "chunks_in_database": scalar(conn, "SELECT sum(n_chunks)::bigint FROM kb.kb_index"),
    }
    # A new backend: the first hybrid pass also fills its BM25 posting cache.
    for key, method in (
        ("hybrid_first_pass", "hybrid"),
        ("hybrid", "hybrid"),
        ("full_text", "full_text"),
        ("vector", "vector"),
    ):
        times = []
        for q in queries:
            t0 = time.perf_counter()
            conn.execute(
                "SELECT * FROM kb.search(%s, %s, method => %s)", (kb, q, method)
            ).fetchall()
            times.append(time.perf_counter() - t0)
        out[key] = lat(times[5:])
    parts: dict[str, list[float]] = {
        "embed_query": [],
        "vector_search_100": [],
        "bm25_search_100": [],
    }
    for q in queries:
        t0 = time.perf_counter()
        vec = scalar(conn, "SELECT kb.embed_query(%s, %s)", (kb, q))
        t1 = time.perf_counter()
        conn.execute("SELECT * FROM kb.vector_search(%s, %s::real[], 100)", (ix, vec)).fetchall()
        t2 = time.perf_counter()
        conn.execute("SELECT * FROM kb.bm25_search(%s, %s, 100)", (ix, q)).fetchall()
        t3 = time.perf_counter()
        parts["embed_query"].append(t1 - t0)
        parts["vector_search_100"].append(t2 - t1)
        parts["bm25_search_100"].append(t3 - t2)
    out["parts"] = {k: lat(v[5:]) for k, v in parts.items()}
    conn.close()
    return out
