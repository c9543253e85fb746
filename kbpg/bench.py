"""`kbpg bench` (`make bench`): quality, speed and scale figures in one run.

Every figure names its workload. Groups: quality (SciFact, vs a ts_rank_cd baseline),
bm25 (speed at 100k chunks vs ts_rank_cd), hybrid (latency at 10k/100k[/1M] chunks),
hnsw (recall@10 vs exact search), ingest (worker vs raw model; a 200-page PDF),
startup (first search on a fresh connection; memory per server process).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kbpg.db import scalar
from kbpg.resources import CHECKOUT as REPO_ROOT
from kbpg.resources import repo_path

SCIFACT = REPO_ROOT / "data" / "beir" / "scifact"
GROUPS = (
    "quality",
    "bm25",
    "hybrid",
    "hnsw",
    "rls",
    "graph",
    "docs",
    "codegraph",
    "ingest",
    "startup",
)
# Only with --only: building the 1M-chunk KB takes about an hour on 2 cores.
ON_REQUEST = ("scale",)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def _lat(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"p50_ms": round(_pct(ms, 50), 2), "p95_ms": round(_pct(ms, 95), 2), "n": len(ms)}


def scifact_dir() -> Path:
    env = os.environ.get("KBPG_SCIFACT")
    return Path(env) if env else SCIFACT


# --- 1. quality -----------------------------------------------------------------------------
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


def bench_quality(dsn: str, quick: bool) -> dict[str, Any]:
    from kbpg.client import Client
    from kbpg.evaluate import EVAL_CONFIG, ensure_loaded, evaluate, load_beir, metrics

    data = load_beir(scifact_dir(), "test")
    if quick:  # every judged document plus a slice of the rest, and 50 queries
        keep_q = dict(list(data.queries.items())[:50])
        judged = {d for q in keep_q for d in data.qrels[q]}
        extra = [d for d in data.corpus if d not in judged][:400]
        data.corpus = {d: data.corpus[d] for d in [*judged, *extra] if d in data.corpus}
        data.queries = keep_q
        data.qrels = {q: data.qrels[q] for q in keep_q}
    kb = "bench-scifact-quick" if quick else "beir-scifact"
    out: dict[str, Any] = {
        "workload": f"BEIR SciFact test, {len(data.queries)} queries, "
        f"{len(data.corpus)} documents (title + text), default config "
        "(markdown_header 200/20, all-MiniLM-L6-v2 int8) plus title_line"
    }
    with Client(dsn) as client:
        seconds = ensure_loaded(client, dsn, kb, data, concurrency=2, indexing_config=EVAL_CONFIG)
        out["index_seconds"] = round(seconds, 1)
        # Fusion named explicitly: a KB made before the zscore default is pinned to rrf.
        for label, method, options in (
            ("full_text", "full_text", {}),
            ("vector", "vector", {}),
            ("hybrid", "hybrid", {"fusion": "zscore"}),
            ("hybrid_no_plain_shift", "hybrid", {"fusion": "zscore", "plain_query_shift": 0}),
            ("hybrid_rrf", "hybrid", {"fusion": "rrf"}),
        ):
            _say(f"quality: {label}")
            r = evaluate(client, kb, data, method, 100, options=options, show_progress=False)
            out[label] = {k: round(v, 4) for k, v in r.items() if isinstance(v, float)}
        _say("quality: ts_rank_cd baseline")
        runs = {
            q: ts_rank_cd_run(client.conn, kb, text, 300)[:100] for q, text in data.queries.items()
        }
        out["ts_rank_cd"] = {k: round(v, 4) for k, v in metrics(runs, data.qrels).items()}
    out["targets"] = {"full_text ndcg@10": 0.68, "hybrid ndcg@10": 0.71}
    return out


# --- synthetic corpora ----------------------------------------------------------------------
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
        _say(f"  {name}: {start + n}/{n_chunks} chunks ({time.monotonic() - t0:.0f}s)")
    t1 = time.monotonic()
    # The HNSW graph is built fastest in memory: 1M 384-d vectors need about 3 GB.
    conn.execute(f"SET maintenance_work_mem = '{'4GB' if n_chunks > 300_000 else '1GB'}'")
    conn.execute(indexdef)
    _say(f"  {name}: HNSW index built in {time.monotonic() - t1:.0f}s")
    conn.execute("VACUUM ANALYZE kb.posting")
    conn.execute("VACUUM ANALYZE kb.chunk")
    conn.execute("VACUUM ANALYZE kb.embedding")
    return int(ix)


def bench_queries(n: int) -> list[str]:
    from kbpg.evaluate import load_beir

    return list(load_beir(scifact_dir(), "test").queries.values())[:n]


# --- 2. BM25 speed --------------------------------------------------------------------------
def bench_bm25(dsn: str, quick: bool) -> dict[str, Any]:
    import psycopg

    n = 20_000 if quick else 100_000
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn, autocommit=True) as in_sql,
    ):
        ix = build_synthetic_kb(conn, f"bench-syn2-{n}", n)
        in_sql.execute("SET kb.bm25_cache_mb = 0")  # the SQL scorer (MaxScore)
        queries = bench_queries(100 if quick else 300)
        kbpg_t, base_t, matches = [], [], []
        full_t: list[float] = []
        depth_t: list[float] = []
        sql_t: list[float] = []
        sql_depth_t: list[float] = []
        cut: list[float] = []
        for q in queries * 2:  # the first pass fills the caches (and the posting cache)
            t0 = time.perf_counter()
            conn.execute("SELECT * FROM kb.bm25_search(%s, %s, 10)", (ix, q)).fetchall()
            kbpg_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            conn.execute("SELECT * FROM kb.bm25_search(%s, %s, 100)", (ix, q)).fetchall()
            depth_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with in_sql.transaction():
                in_sql.execute("SELECT * FROM kb.bm25_search(%s, %s, 10)", (ix, q)).fetchall()
                used = scalar(in_sql, "SELECT current_setting('kb.bm25_essential', true)")
            sql_t.append(time.perf_counter() - t0)
            if used and "/" in used:
                e, m = (int(x) for x in used.split("/"))
                cut.append(1 - e / m if m else 0.0)
            t0 = time.perf_counter()
            in_sql.execute("SELECT * FROM kb.bm25_search(%s, %s, 100)", (ix, q)).fetchall()
            sql_depth_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            conn.execute("SELECT * FROM kb._bm25_exhaustive(%s, %s, 10)", (ix, q)).fetchall()
            full_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            conn.execute(
                "WITH q AS (SELECT to_tsquery('english', string_agg(quote_literal(lexeme), ' | ')) q"
                " FROM unnest(to_tsvector('english', %s))) SELECT c.id, ts_rank_cd(c.tsv, q.q) r "
                "FROM kb.chunk c, q WHERE c.tsv @@ q.q AND c.index_id = %s ORDER BY r DESC LIMIT 10",
                (q, ix),
            ).fetchall()
            base_t.append(time.perf_counter() - t0)
        for q in queries[:50]:
            matches.append(
                scalar(
                    conn,
                    "SELECT count(*) FROM kb.chunk c WHERE c.index_id = %s AND c.tsv @@ (SELECT "
                    "to_tsquery('english', string_agg(quote_literal(lexeme), ' | ')) FROM "
                    "unnest(to_tsvector('english', %s)))",
                    (ix, q),
                )
            )
        cache = conn.execute("SELECT * FROM kb.bm25_cache_stats()").fetchone() or ()
    k, b = _lat(kbpg_t[len(queries) :]), _lat(base_t[len(queries) :])
    return {
        "workload": f"{n} chunks of 3 recombined SciFact sentences each; {len(queries)} SciFact "
        "queries (OR of their lexemes), top 10; second pass (warm caches)",
        "kbpg_bm25": k,
        "kbpg_bm25_top100": _lat(depth_t[len(queries) :]),
        "kbpg_bm25_first_pass": _lat(kbpg_t[: len(queries)]),
        "posting_cache": dict(zip(("terms", "megabytes", "hits", "misses"), cache, strict=False)),
        "sql_scorer": _lat(sql_t[len(queries) :]),
        "sql_scorer_top100": _lat(sql_depth_t[len(queries) :]),
        "exhaustive_bm25": _lat(full_t[len(queries) :]),
        "sql_terms_pruned_mean": round(statistics.mean(cut), 3) if cut else None,
        "ts_rank_cd": b,
        "median_match_set": int(statistics.median(matches)),
        "ratio_p50": round(k["p50_ms"] / b["p50_ms"], 3),
        "ratio_p95": round(k["p95_ms"] / b["p95_ms"], 3),
        "target": "ratio <= 1.0; p50 <= 5 ms at 100k chunks",
    }


# --- 3. hybrid latency and 4. HNSW recall -----------------------------------------------------
def _fresh_search_conn(dsn: str) -> Any:
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SELECT kb.embed_query((SELECT name FROM kb.knowledge_base LIMIT 1), 'warm up')")
    return conn


def bench_hybrid(dsn: str, quick: bool, sizes: list[int]) -> dict[str, Any]:
    import psycopg

    out: dict[str, Any] = {
        "workload": "kb.search hybrid, top 10, fusion_depth 100, query "
        "embedded in the database with all-MiniLM-L6-v2 on each call; "
        "chunks of recombined SciFact sentences with clustered synthetic "
        "384-d vectors (embedding that many chunks locally is too slow here)"
    }
    queries = bench_queries(50 if quick else 200)
    for n in sizes:
        with psycopg.connect(dsn, autocommit=True) as conn:
            build_synthetic_kb(conn, f"bench-syn2-{n}", n)
        conn = _fresh_search_conn(dsn)
        times = []
        for q in queries * 2:  # a new backend: the first pass fills its posting cache
            t0 = time.perf_counter()
            conn.execute("SELECT * FROM kb.search(%s, %s)", (f"bench-syn2-{n}", q)).fetchall()
            times.append(time.perf_counter() - t0)
        conn.close()
        out[str(n)] = _lat(times[len(queries) :])
        out[f"{n}_first_pass"] = _lat(times[5 : len(queries)])
    out["targets"] = {"100000": "p50 <= 15 ms, p95 <= 40 ms", "1000000": "p50 <= 60 ms"}
    return out


def bench_hnsw(dsn: str, quick: bool) -> dict[str, Any]:
    import psycopg

    n = 20_000 if quick else 100_000
    # 200 queries: the queries are near ties (below), and 50 of them moved the figure by
    # up to 0.07 from one draw to the next. The draw is seeded, so runs compare.
    n_queries = 50 if quick else 200
    rng = np.random.default_rng(42)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ix = build_synthetic_kb(conn, f"bench-syn2-{n}", n)
        conn.execute("SELECT setseed(0.42)")
        sample = [
            r[0]
            for r in conn.execute(
                "SELECT embedding::text FROM kb.embedding WHERE index_id = %s "
                "ORDER BY random() LIMIT %s",
                (ix, n_queries),
            )
        ]
        out: dict[str, Any] = {
            "workload": f"{n} synthetic 384-d vectors (64 topics in a 48-d latent space); "
            f"{n_queries} queries (stored vectors plus noise about twice their length, the "
            "same for every setting and run); recall@10 of kb.vector_search vs exact cosine "
            "order; filter keeps category=rare (10%)"
        }
        queries = []
        for s in sample:
            v = np.array(json.loads(s), dtype=np.float32)
            v = v + 0.1 * rng.normal(size=v.shape).astype(np.float32)
            queries.append((v / np.linalg.norm(v)).tolist())
        exact: dict[tuple[str, int], set[int]] = {}
        conn.execute("SET enable_indexscan = off")
        for label, flt in (("unfiltered", None), ("filter_10pct", {"category": "rare"})):
            f = json.dumps(flt) if flt else None
            for qi, q in enumerate(queries):
                exact[(label, qi)] = {
                    r[0]
                    for r in conn.execute(
                        "SELECT e.chunk_id FROM kb.embedding e JOIN kb.chunk c ON c.id = e.chunk_id "
                        "WHERE e.index_id = %s AND (%s::jsonb IS NULL OR c.metadata @> %s::jsonb) "
                        "ORDER BY e.embedding <=> %s::real[]::vector LIMIT 10",
                        (ix, f, f, q),
                    )
                }
        conn.execute("RESET enable_indexscan")
        for ef in (40, 100, 150, 200, 400):
            for label, flt in (("unfiltered", None), ("filter_10pct", {"category": "rare"})):
                f = json.dumps(flt) if flt else None
                hits = total = 0
                for qi, q in enumerate(queries):
                    got = {
                        r[0]
                        for r in conn.execute(
                            "SELECT chunk_id FROM kb.vector_search(%s, %s::real[], 10, %s::jsonb, %s)",
                            (ix, q, f, ef),
                        )
                    }
                    hits += len(got & exact[(label, qi)])
                    total += len(exact[(label, qi)])
                out[f"{label}_ef{ef}"] = round(hits / total, 4)
        out["default_ef_search"] = scalar(conn, "SELECT kb._hnsw_default_ef(%s)", (ix,))
        out["target"] = "recall@10 >= 0.98"
        real = scalar(
            conn, "SELECT active_index_id FROM kb.knowledge_base WHERE name = %s", ("beir-scifact",)
        )
        if real is not None:
            n_real = scalar(conn, "SELECT count(*) FROM kb.embedding WHERE index_id = %s", (real,))
            ef_default = scalar(conn, "SELECT kb._hnsw_default_ef(%s)", (real,))
            real_queries = bench_queries(50 if quick else 300)
            hits = total = 0
            for q in real_queries:
                vec = scalar(conn, "SELECT kb.embed_query('beir-scifact', %s)", (q,))
                got = {
                    r[0]
                    for r in conn.execute(
                        "SELECT chunk_id FROM kb.vector_search(%s, %s::real[], 10)", (real, vec)
                    )
                }
                truth = {
                    r[0]
                    for r in conn.execute(
                        "SELECT chunk_id FROM kb.embedding WHERE index_id = %s "
                        "ORDER BY embedding <=> %s::real[]::vector, chunk_id LIMIT 10",
                        (real, vec),
                    )
                }
                hits += len(got & truth)
                total += len(truth)
            out[f"real_scifact_ef{ef_default}"] = round(hits / total, 4)
            out["real_workload"] = (
                f"{n_real} real MiniLM chunk vectors of SciFact, {len(real_queries)} SciFact "
                f"queries, ef_search {ef_default} (the default)"
            )
    return out


# --- 4c. scale: the 1M point, and a small KB beside a large one ------------------------------
def _search_latency(dsn: str, kb: str, queries: list[str]) -> dict[str, Any]:
    """p50/p95 of kb.search per method, and of the parts of a hybrid query on their own."""
    conn = _fresh_search_conn(dsn)
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
        out[key] = _lat(times[5:])
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
    out["parts"] = {k: _lat(v[5:]) for k, v in parts.items()}
    conn.close()
    return out


def bench_scale(dsn: str, quick: bool) -> dict[str, Any]:
    """The large point (1M chunks; KBPG_SCALE_CHUNKS or --quick make it smaller) and a 10k
    KB measured before and after the large KB is in the same database."""
    import psycopg

    big = int(os.environ.get("KBPG_SCALE_CHUNKS") or (100_000 if quick else 1_000_000))
    small = int(os.environ.get("KBPG_SCALE_SMALL") or 10_000)
    queries = bench_queries(50 if quick else 200)
    out: dict[str, Any] = {
        "workload": f"kb.search top 10 over synthetic KBs (recombined SciFact sentences, "
        f"clustered 384-d vectors; built directly in SQL, no worker), {len(queries)} SciFact "
        f"queries embedded in the database; a {small}-chunk KB alone, then beside a "
        f"{big}-chunk KB in the same database"
    }
    big_kb, small_kb = f"bench-syn2-{big}", f"bench-syn2-{small}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        build_synthetic_kb(conn, small_kb, small, seed=1)
        have_big = scalar(
            conn,
            "SELECT i.n_chunks FROM kb.knowledge_base k JOIN kb.kb_index i "
            "ON i.id = k.active_index_id WHERE k.name = %s",
            (big_kb,),
        )
    if have_big != big:
        _say(f"scale: {small_kb} before {big_kb} exists")
        out[f"{small}_before"] = _search_latency(dsn, small_kb, queries)
    t0 = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        build_synthetic_kb(conn, big_kb, big)
    if have_big != big:
        out["build_seconds"] = round(time.monotonic() - t0, 1)
    _say(f"scale: {big_kb}")
    out[str(big)] = _search_latency(dsn, big_kb, queries)
    _say(f"scale: {small_kb} beside {big_kb}")
    out[f"{small}_beside_{big}"] = _search_latency(dsn, small_kb, queries)
    out["targets"] = {
        "1000000": "hybrid p50 <= 60 ms, BM25 p50 <= 25 ms",
        "isolation": "the small KB's figures beside the large one equal its figures before",
    }
    return out


# --- 4b. row-level security ------------------------------------------------------------------
RLS_ROLE = "kbpg_bench_member"


def bench_rls(dsn: str, quick: bool) -> dict[str, Any]:
    """A team member whose KB holds 5% of all vectors: does vector search still fill top_k
    under row-level security, with what recall, and what do the policies cost a search?"""
    import psycopg

    big_n = 19_000 if quick else 95_000
    small_n = big_n // 19
    small = f"bench-rls-team-{small_n}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        build_synthetic_kb(conn, f"bench-rls-other-{big_n}", big_n)
        ix = build_synthetic_kb(conn, small, small_n, seed=1)
        if not scalar(conn, "SELECT 1 FROM pg_roles WHERE rolname = %s", (RLS_ROLE,)):
            try:
                conn.execute(f"CREATE ROLE {RLS_ROLE} NOLOGIN")
            except psycopg.errors.InsufficientPrivilege:
                return {"skipped": f"needs a role that may CREATE ROLE {RLS_ROLE}"}
        if not scalar(conn, "SELECT 1 FROM kb.team WHERE name = 'bench-rls'"):
            conn.execute("SELECT kb.create_team('bench-rls', acting_as => %s)", (RLS_ROLE,))
        conn.execute(
            "UPDATE kb.knowledge_base SET team_id = (SELECT id FROM kb.team WHERE name = "
            "'bench-rls') WHERE name = %s",
            (small,),
        )
        total = scalar(conn, "SELECT count(*) FROM kb.embedding")
        rng = np.random.default_rng(7)
        sample = [
            np.array(json.loads(r[0]), dtype=np.float32)
            for r in conn.execute(
                "SELECT embedding::text FROM kb.embedding WHERE index_id = %s "
                "ORDER BY random() LIMIT 50",
                (ix,),
            )
        ]
        queries = []
        for v in sample:
            v = v + 0.1 * rng.normal(size=v.shape).astype(np.float32)
            queries.append((v / np.linalg.norm(v)).tolist())
        conn.execute("SET enable_indexscan = off")
        exact = [
            {
                r[0]
                for r in conn.execute(
                    "SELECT chunk_id FROM kb.embedding WHERE index_id = %s "
                    "ORDER BY embedding <=> %s::real[]::vector LIMIT 10",
                    (ix, q),
                )
            }
            for q in queries
        ]
        conn.execute("RESET enable_indexscan")
    out: dict[str, Any] = {
        "workload": f"a team KB of {small_n} synthetic 384-d vectors = "
        f"{100 * small_n / max(total, 1):.0f}% of the {total} in kb.embedding, searched by a "
        "member role under row-level security (SET ROLE); 50 queries; recall@10 vs exact "
        "cosine order; latency of kb.search as the member vs as the owner"
    }
    member = psycopg.connect(dsn, autocommit=True)
    member.execute(f"SET ROLE {RLS_ROLE}")
    hits = filled = 0
    for q, truth in zip(queries, exact, strict=True):
        got = {
            r[0]
            for r in member.execute(
                "SELECT chunk_id FROM kb.vector_search(%s, %s::real[], 10)", (ix, q)
            )
        }
        filled += len(got)
        hits += len(got & truth)
    out["member_fill_top10"] = round(filled / (10 * len(queries)), 4)
    out["member_recall_at_10"] = round(hits / sum(len(t) for t in exact), 4)
    out["target"] = "fill 1.0, recall@10 >= 0.95"
    words = bench_queries(50 if quick else 100)
    owner = _fresh_search_conn(dsn)
    member.execute("SELECT kb.embed_query(%s, 'warm up')", (small,))
    for method in ("full_text", "hybrid"):
        for label, c in (("owner", owner), ("member", member)):
            times = []
            for q in words:
                t0 = time.perf_counter()
                c.execute("SELECT * FROM kb.search(%s, %s, method => %s)", (small, q, method))
                times.append(time.perf_counter() - t0)
            out[f"{method}_{label}"] = _lat(times[5:])
    owner.close()
    member.close()
    return out


# --- 5. ingestion ---------------------------------------------------------------------------
def _fresh_kb(
    dsn: str, name: str, config: dict[str, Any], docs: list[Any], texts: list[str]
) -> None:
    """A new KB holding ``texts`` (queued, not indexed yet)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (name,))
        conn.execute("SELECT kb.create_knowledge_base(%s, %s)", (name, json.dumps(config)))
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "SELECT kb.add_document(%s, %s, %s)",
                [(name, d, t) for (d, _), t in zip(docs, texts, strict=True)],
            )


def _drop_and_vacuum(dsn: str, names: list[str]) -> None:
    """Drops these KBs where they exist and vacuums the database, so that cleaning up
    after them is done before the next measurement rather than during it."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (name,))
        conn.execute("VACUUM")


class _SlowEmbedder:
    """An OpenAI-compatible embeddings endpoint that answers each request after a fixed
    delay (a provider's round trip), with hashed vectors; it counts requests."""

    def __init__(self, delay: float, dim: int = 64) -> None:
        import hashlib
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests = 0
        lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with lock:
                    owner.requests += 1
                time.sleep(delay)
                data = []
                for i, text in enumerate(body["input"]):
                    seed = hashlib.blake2b(text.encode(), digest_size=8).digest()
                    vec = np.random.default_rng(int.from_bytes(seed, "little")).normal(size=dim)
                    data.append(
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": (vec / np.linalg.norm(vec)).tolist(),
                        }
                    )
                n = sum(len(t.split()) for t in body["input"])
                raw = json.dumps(
                    {
                        "object": "list",
                        "data": data,
                        "model": body.get("model"),
                        "usage": {"prompt_tokens": n, "total_tokens": n},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _ingest_remote(
    dsn: str, docs: list[Any], texts: list[str], chunks: list[str], delay: float = 0.1
) -> dict[str, Any]:
    """Many small documents through a remote provider whose every request takes ``delay``
    seconds: the worker one job at a time vs claiming 16 and embedding them together, and
    the provider's own ceiling (all chunks in batches of 64, 4 requests in flight)."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    from kbpg.worker import Worker

    server = _SlowEmbedder(delay)
    try:
        # The provider's key for the worker's sessions only (litellm wants one).
        key_dsn = make_conninfo(dsn, options="-c kb.bench_embed_key=unused")
        config = {
            "embedding_model": "openai/bench-embed",
            "embedding_dimensions": 64,
            "api_base": server.url,
            "api_key_name": "BENCH_EMBED_KEY",
        }
        from concurrent.futures import ThreadPoolExecutor
        from urllib.request import Request, urlopen

        def post(batch: list[str]) -> None:
            req = Request(
                server.url + "/embeddings",
                json.dumps({"input": batch}).encode(),
                {"Content-Type": "application/json"},
            )
            urlopen(req).read()

        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(post, [chunks[i : i + 64] for i in range(0, len(chunks), 64)]))
        out: dict[str, Any] = {
            "workload": f"the same {len(docs)} documents, a provider answering each request "
            f"after {delay * 1000:.0f} ms (local HTTP server, real litellm client), batch_size "
            "64, embedding_concurrency 4, one worker thread",
            "provider_ceiling_chunks_per_s": round(len(chunks) / (time.perf_counter() - t0), 1),
        }
        for batch in (1, 16):
            _fresh_kb(dsn, "bench-ingest-remote", config, docs, texts)
            server.requests = 0
            t0 = time.perf_counter()
            Worker(key_dsn, concurrency=1, once=True, poll_interval=0.2, batch=batch).run()
            out[f"batch{batch}"] = {
                "chunks_per_s": round(len(chunks) / (time.perf_counter() - t0), 1),
                "requests": server.requests,
            }
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT kb.drop_knowledge_base('bench-ingest-remote', true)")
    finally:
        server.close()
    return out


def _raw_server(threads: int, barrier: Any, warm: list[str], commands: Any, results: Any) -> None:
    """A process of the raw model (kbpg.bench's raw_model figure): loads it at ``threads``
    ONNX threads and warms it, then for each list of texts it is sent waits for the other
    processes of its group, embeds them in batches of 64 and reports when it ran."""
    from kbpg_db.embedding import LocalMiniLM

    model = LocalMiniLM(threads=threads)
    model.embed(warm)
    results.put(None)
    while (texts := commands.get()) is not None:
        barrier.wait()
        t0 = time.time()
        model.embed(texts, batch_size=64)
        results.put((t0, time.time()))


class _RawModel:
    """The raw model as ``processes`` processes of ``threads`` ONNX threads each, loaded
    once and kept (a measurement costs only the embedding): ``rate(texts)`` embeds the texts
    shared out over the processes, in chunks/s from the first start to the last end."""

    def __init__(self, processes: int, threads: int, warm: list[str]) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        barrier, self.results = ctx.Barrier(processes), ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(processes)]
        self.procs = [
            ctx.Process(target=_raw_server, args=(threads, barrier, warm, q, self.results),
                        daemon=True)
            for q in self.commands
        ]  # fmt: skip
        for proc in self.procs:
            proc.start()
        for _ in self.procs:
            self.results.get(timeout=600)

    def rate(self, texts: list[str]) -> float:
        n = len(self.commands)
        for i, q in enumerate(self.commands):
            q.put(texts[i::n])
        spans = [self.results.get(timeout=900) for _ in self.commands]
        return len(texts) / (max(e for _, e in spans) - min(s for s, _ in spans))

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for proc in self.procs:
            proc.join(timeout=60)


class _RunningWorker:
    """A `kbpg worker` with default settings, running in a thread over a new KB;
    ``ingest(items)`` queues documents in one commit and returns the seconds until all are
    ready. It waits for work on NOTIFY (polling every 2 s, its default), so between
    ingestions it costs the machine next to nothing."""

    def __init__(self, dsn: str, kb: str) -> None:
        import threading

        import psycopg

        from kbpg.worker import Worker

        _fresh_kb(dsn, kb, {}, [], [])
        self.worker = Worker(dsn)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.kb = kb
        self.kb_id = scalar(self.conn, "SELECT id FROM kb.knowledge_base WHERE name = %s", (kb,))
        self.queued = 0
        self.thread.start()

    def ingest(self, items: list[tuple[str, str]]) -> float:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany("SELECT kb.add_document(%s, %s, %s)", [(self.kb, *i) for i in items])
        t0 = time.perf_counter()
        self.queued += len(items)
        deadline, done0 = time.monotonic() + 1800, None
        while (
            done := scalar(
                self.conn,
                "SELECT count(*) FROM kb.document WHERE kb_id = %s AND status = 'ready'",
                (self.kb_id,),
            )
        ) < self.queued:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the worker stopped before the documents were ready")
            # The poll's own cost stays out of the figure: ten counts a second took
            # 0.25 core-s of a 35 s run. A quarter of the time the rest should take at the
            # rate so far (1 s at most, 20 ms at the least) keeps it to a few polls a second
            # at most, and the end within a few tens of milliseconds.
            done0 = done if done0 is None else done0
            elapsed = time.perf_counter() - t0
            rate = (done - done0) / elapsed if elapsed > 0 else 0.0
            time.sleep(min(1.0, max(0.02, (self.queued - done) / rate / 4)) if rate > 0 else 0.1)
        return time.perf_counter() - t0

    def close(self) -> int:
        self.worker.stop()
        self.thread.join()
        self.conn.close()
        return self.worker.concurrency


def ingest_ratio(
    worker_seconds: list[float], chunks: list[int], raw_rates: dict[str, list[tuple[float, float]]]
) -> dict[str, Any]:
    """The worker against the raw model, from interleaved measurements: segment i's
    ``chunks[i]`` took the worker ``worker_seconds[i]``, and each raw configuration ran at
    ``raw_rates[c][i]`` = (chunks/s just before it, just after it). A segment's raw time is
    its chunks at the mean of the two rates; the raw figure is the configuration with the
    least raw time over all segments; ratio = its time / the worker's."""
    if len(worker_seconds) != len(chunks) or any(len(r) != len(chunks) for r in raw_rates.values()):
        raise ValueError("ingest_ratio: one worker time and one pair of raw rates per segment")
    raw_seconds = {
        c: [n / ((a + b) / 2) for n, (a, b) in zip(chunks, r, strict=True)]
        for c, r in raw_rates.items()
    }
    best = min(raw_seconds, key=lambda c: sum(raw_seconds[c]))
    total = sum(chunks)
    return {
        "raw_configuration": best,
        "raw_model_chunks_per_s": round(total / sum(raw_seconds[best]), 1),
        "worker_chunks_per_s": round(total / sum(worker_seconds), 1),
        "ratio": round(sum(raw_seconds[best]) / sum(worker_seconds), 3),
        "segment_ratios": [
            round(r / w, 3) for r, w in zip(raw_seconds[best], worker_seconds, strict=True)
        ],
    }


def bench_ingest(dsn: str, quick: bool) -> dict[str, Any]:
    import psycopg
    from kbpg_db.chunking import chunk_text

    from kbpg.client import Client
    from kbpg.evaluate import load_beir
    from kbpg.worker import Worker

    n_docs = 100 if quick else 400
    data = load_beir(scifact_dir(), "test")
    docs = list(data.corpus.items())[-n_docs:]
    texts = [f"{t}\n{x}" for _, (t, x) in docs]
    doc_chunks = [[c.embed_text for c in chunk_text(t)] for t in texts]
    chunks = [c for d in doc_chunks for c in d]
    with psycopg.connect(dsn, autocommit=True) as conn:
        cores = int(scalar(conn, "SELECT kb.server_cpu_count()"))
    threads = int(os.environ.get("KBPG_BENCH_THREADS", "0"))

    # This machine's speed drifts by tens of percent from one half-minute to the next (the
    # same raw run: 32 to 47 chunks/s within three minutes), so whole runs of raw, worker,
    # raw compared a worker run with raw runs a minute away from it. Instead the documents
    # are ingested in segments (every n-th document, so the segments are alike), each
    # between two short raw runs on the same chunks, with the raw model's processes and
    # the worker's connections loaded and warm throughout.
    segments = 2 if quick else 4
    passes = 1 if quick else 3
    configs = {f"1 process, {threads or cores} threads": (1, threads)}
    if cores > 1:
        configs[f"{cores} processes, 1 thread"] = (cores, 1)
    out: dict[str, Any] = {
        "workload": f"{n_docs} SciFact documents, {len(chunks)} chunks (default config), "
        f"ingested by a running `kbpg worker` (default settings) in {segments} like segments "
        f"(document i in segment i mod {segments}), {passes} pass(es), each timed from the "
        "commit that queues it until all are ready. raw = the same model in this machine's processes, "
        "loaded and warm, batch 64, run on the segment's chunks just before and just after "
        "it: the better of " + " and ".join(configs) + " over all segments. ratio = raw "
        "time / worker time over all segments. cold = started with the documents queued, "
        "loading the model in each connection"
    }
    # Each pass gets a KB of its own, none dropped until the passes are over: the rows a
    # drop leaves dead are cleaned up by autovacuum (here at the next minute mark, ~1 s of a
    # core), which should not land in a measured segment. What an earlier run left is
    # dropped and vacuumed now, before anything is measured.
    pass_kbs = [f"bench-ingest-{p + 1}" for p in range(passes)]
    _drop_and_vacuum(dsn, [*pass_kbs, "bench-ingest"])
    raws = {name: _RawModel(n, t, chunks[:64]) for name, (n, t) in configs.items()}
    members = [range(s, len(docs), segments) for s in range(segments)]
    parts = [[c for i in idx for c in doc_chunks[i]] for idx in members]
    worker_seconds: list[float] = []
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    try:

        def measure(part: list[str]) -> dict[str, float]:
            return {name: raw.rate(part) for name, raw in raws.items()}

        for kb in pass_kbs:
            running = _RunningWorker(dsn, kb)
            # Each connection's server process loads the model before the measurement.
            running.ingest(
                [(d, f"{t}\n{x}") for d, (t, x) in list(data.corpus.items())[: 4 * cores]]
            )
            before = measure(parts[0])
            for s, idx in enumerate(members):
                worker_seconds.append(running.ingest([(docs[i][0], texts[i]) for i in idx]))
                # Just after this segment, on the next one's chunks: also the next one's before.
                after = measure(parts[min(s + 1, segments - 1)])
                for name in configs:
                    rates[name].append((before[name], after[name]))
                before = after
            connections = running.close()
    finally:
        for raw in raws.values():
            raw.close()
    out.update(ingest_ratio(worker_seconds, [len(p) for p in parts] * passes, rates))
    out["worker_connections"] = connections
    # Per configuration and segment: (chunks/s just before, just after).
    out["raw_rates_chunks_per_s"] = {
        name: [[round(a, 1), round(b, 1)] for a, b in pairs] for name, pairs in rates.items()
    }
    out["target"] = "ratio >= 0.9"
    _drop_and_vacuum(dsn, pass_kbs)
    _fresh_kb(dsn, "bench-ingest", {}, docs, texts)
    t0 = time.perf_counter()
    Worker(dsn, once=True, poll_interval=0.2).run()
    out["worker_cold_chunks_per_s"] = round(len(chunks) / (time.perf_counter() - t0), 1)
    # The same documents one job at a time (no embedding across documents).
    _fresh_kb(dsn, "bench-ingest", {}, docs, texts)
    t0 = time.perf_counter()
    Worker(dsn, once=True, poll_interval=0.2, batch=1).run()
    out["worker_cold_batch1_chunks_per_s"] = round(len(chunks) / (time.perf_counter() - t0), 1)
    out["remote"] = _ingest_remote(dsn, docs, texts, chunks)
    # A 200-page PDF from SciFact text, through `kbpg ingest --wait`.
    import pymupdf

    pages = 40 if quick else 200
    body = [f"{t}\n{x}" for _, (t, x) in list(data.corpus.items())[:pages]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scifact-book.pdf"
        pdf = pymupdf.open()
        for text in body:
            page = pdf.new_page()
            page.insert_textbox(pymupdf.Rect(40, 40, 570, 800), text, fontsize=8)
        pdf.save(path)
        with Client(dsn) as client:
            client.drop_knowledge_base("bench-pdf", if_exists=True)
            client.create_knowledge_base("bench-pdf")
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kbpg.cli",
                "--dsn",
                dsn,
                "ingest",
                "bench-pdf",
                str(path),
                "--wait",
            ],
            check=True,
            capture_output=True,
        )
        seconds = time.perf_counter() - t0
        with Client(dsn) as client:
            doc = client.document_status("bench-pdf")[0]
    out["pdf"] = {
        "pages": pages,
        "chunks": doc["chunk_count"],
        "status": doc["status"],
        "seconds_to_ready": round(seconds, 1),
    }
    return out


# --- GraphIndex against ChunkEmbed on one corpus ----------------------------------------------
def handbooks(data: Any, per_book: int = 8) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """SciFact abstracts as numbered sections of Markdown handbooks ("## 3.2 <title>"), each
    section but the first referring to the one before ("See Section 3.1."). Returns the
    documents and a section-title -> SciFact id map for scoring."""
    docs: list[tuple[str, str]] = []
    by_title: dict[str, str] = {}
    items = list(data.corpus.items())
    for b in range(0, len(items), per_book):
        n = b // per_book + 1
        parts = [f"# Handbook {n}\n"]
        for k, (doc_id, (title, text)) in enumerate(items[b : b + per_book], start=1):
            head = f"{n}.{k} {title.strip()}"
            by_title[head] = doc_id
            see = f" See Section {n}.{k - 1}." if k > 1 else ""
            parts.append(f"## {head}\n{text.strip()}{see}\n")
        docs.append((f"handbook-{n}", "\n".join(parts)))
    return docs, by_title


def bench_graph(dsn: str, quick: bool) -> dict[str, Any]:
    """GraphIndex (rules only: no LLM here) and ChunkEmbed over the same Markdown corpus:
    build time, search latency with and without expansion, and SciFact quality."""
    import psycopg

    from kbpg.evaluate import load_beir, metrics
    from kbpg.worker import Worker

    data = load_beir(scifact_dir(), "test")
    keep_q = dict(list(data.queries.items())[: 50 if quick else 300])
    judged = {d for q in keep_q for d in data.qrels[q] if d in data.corpus}
    rest = [d for d in data.corpus if d not in judged][: 200 if quick else 700]
    data.corpus = {d: data.corpus[d] for d in [*sorted(judged), *rest]}
    docs, by_title = handbooks(data)
    out: dict[str, Any] = {
        "workload": f"{len(data.corpus)} SciFact abstracts as numbered sections of {len(docs)} "
        f"Markdown handbooks, {len(keep_q)} SciFact queries; local MiniLM; GraphIndex with "
        "enrichment rules (no LLM: a section is embedded from its own text)"
    }
    kbs = {
        "chunk_embed": {"title_line": False},
        "graph_index": {"strategy": "graph_index", "extra": {"enrichment": "rules"}},
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, cfg in kbs.items():
            kb = f"bench-graph-{name}"
            conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (kb,))
            conn.execute("SELECT kb.create_knowledge_base(%s, %s)", (kb, json.dumps(cfg)))
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany("SELECT kb.add_document(%s, %s, %s)", [(kb, t, x) for t, x in docs])
            _say(f"graph: indexing {kb}")
            t0 = time.perf_counter()
            Worker(dsn, concurrency=1, once=True, poll_interval=0.2).run()
            row: Any = conn.execute(
                "SELECT count(*) FROM kb.chunk c JOIN kb.knowledge_base k "
                "ON k.active_index_id = c.index_id WHERE k.name = %s",
                (kb,),
            ).fetchone()
            out[name] = {"index_seconds": round(time.perf_counter() - t0, 1), "chunks": row[0]}
        edges: Any = conn.execute(
            "SELECT sum(rule_edges), sum(llm_edges) FROM kb.graph_index_documents "
            "WHERE kb = 'bench-graph-graph_index'"
        ).fetchone()
        out["graph_index"]["edges"] = {"rule": int(edges[0] or 0), "llm": int(edges[1] or 0)}
    conn = _fresh_search_conn(dsn)
    runs_for = [
        ("chunk_embed", "hybrid", {}),
        ("chunk_embed", "full_text", {}),
        ("graph_index", "hybrid", {"graph_expansion": False}),
        ("graph_index", "hybrid", {}),
        ("graph_index", "full_text", {}),
    ]
    for name, method, extra in runs_for:
        kb = f"bench-graph-{name}"
        label = f"{name} {method}" + (" +expansion" if name == "graph_index" and not extra else "")
        _say(f"graph: {label}")
        times, runs = [], {}
        for qid, text in keep_q.items():
            t0 = time.perf_counter()
            rows = conn.execute(
                "SELECT heading_path, expanded_from FROM kb.search(%s, %s, method => %s, "
                "options => %s::jsonb)",
                (kb, text, method, json.dumps(extra)),
            ).fetchall()
            times.append(time.perf_counter() - t0)
            seen: list[str] = []
            for path, expanded in rows:
                doc = by_title.get(path[-1]) if path else None
                if doc and doc not in seen and expanded is None:
                    seen.append(doc)
            runs[qid] = seen
        quality = metrics(runs, {q: data.qrels[q] for q in keep_q})
        out[label] = {
            **_lat(times[5:]),
            "ndcg@10": round(quality["ndcg@10"], 4),
            "recall@10": round(quality["recall@10"], 4),
        }
    conn.close()
    return out


def docs_dir(name: str = "docs-pg") -> Path:
    return repo_path("data", name)


# The documentation sets: the PostgreSQL manual with questions that mostly carry a word of
# their answer, and the Python library reference with questions that carry none.
DOCS_SETS = {
    "docs-pg": "PostgreSQL 15 manual pages, developer questions",
    "docs-python": "Python 3.11 library reference pages, paraphrased questions",
}

# Retrieval settings scored on the documentation sets: the channels alone, then fusion.
DOCS_RUNS: list[tuple[str, dict[str, Any]]] = [
    ("vector", {"method": "vector"}),
    ("full_text", {"method": "full_text"}),
    ("hybrid (defaults: zscore, vector_weight 0.5, plain_query_shift 0.2)", {}),
    ("hybrid plain_query_shift 0", {"plain_query_shift": 0}),
    ("hybrid zscore vector_weight 0.3", {"vector_weight": 0.3, "plain_query_shift": 0}),
    ("hybrid zscore vector_weight 0.7", {"vector_weight": 0.7, "plain_query_shift": 0}),
    ("hybrid rrf (rrf_k 60)", {"fusion": "rrf"}),
    ("hybrid rrf rrf_k 10", {"fusion": "rrf", "rrf_k": 10}),
]


def bench_docs(dsn: str, quick: bool) -> dict[str, Any]:
    """Each documentation set (data/docs-pg, data/docs-python): its HTML pages through
    kb.add_file, its questions with a gold section each, every method and fusion setting
    scored with kb.run_test_set (Success@1/@5, MRR@10, nDCG@10), and search latency."""
    out: dict[str, Any] = {
        "workload": "; ".join(f"{k}: {v}" for k, v in DOCS_SETS.items())
        + "; local MiniLM, markdown_header chunks of 200 tokens"
    }
    for name in DOCS_SETS:
        out[name] = _bench_docs_set(dsn, name, quick)
    return out


def _bench_docs_set(dsn: str, name: str, quick: bool) -> dict[str, Any]:
    import psycopg

    from kbpg.worker import Worker

    folder = docs_dir(name)
    pages = sorted((folder / "html").glob("*.html"))
    questions = [json.loads(x) for x in (folder / "questions.jsonl").read_text().splitlines()]
    kb = f"bench-{name}"
    out: dict[str, Any] = {"pages": len(pages), "questions": len(questions)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        # kb.list_documents, not the view by name: planned for this KB, not an average one
        # (a scan of every document beside the scale group's 1M-chunk KB).
        built = conn.execute(
            "SELECT count(*) FILTER (WHERE d.status = 'ready') FROM kb.knowledge_base k, "
            "kb.list_documents(k.name) d WHERE k.name = %s",
            (kb,),
        ).fetchone()
        if not built or built[0] != len(pages):
            conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (kb,))
            conn.execute("SELECT kb.create_knowledge_base(%s)", (kb,))
            for page in pages:
                conn.execute("SELECT kb.add_file(%s, %s, %s)", (kb, page.name, page.read_bytes()))
            _say(f"{name}: indexing {len(pages)} pages")
            t0 = time.perf_counter()
            Worker(dsn, concurrency=2, once=True, poll_interval=0.2).run()
            out["index_seconds"] = round(time.perf_counter() - t0, 1)
        chunks: Any = conn.execute(
            "SELECT sum(chunk_count), count(*) FILTER (WHERE status = 'error') "
            "FROM kb.list_documents(%s)",
            (kb,),
        ).fetchone()
        out["chunks"], out["failed_pages"] = int(chunks[0] or 0), int(chunks[1] or 0)
        conn.execute(
            "SELECT kb.delete_test_set(%s, 'docs') FROM kb.test_sets(%s) WHERE name = 'docs'",
            (kb, kb),
        )
        conn.execute("SELECT kb.create_test_set(%s, 'docs')", (kb,))
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "SELECT kb.add_test_query(%s, 'docs', %s, %s)",
                [(kb, q["query"], q["expected"]) for q in questions],
            )
    conn = _fresh_search_conn(dsn)
    for label, options in DOCS_RUNS[: 4 if quick else None]:
        _say(f"{name}: {label}")
        t0 = time.perf_counter()
        run: Any = conn.execute(
            "SELECT kb.run_test_set(%s, 'docs', %s::jsonb, save => false)",
            (kb, json.dumps(options)),
        ).fetchone()
        run = run[0]
        per_query_ms = (time.perf_counter() - t0) * 1000 / len(questions)
        m = run["metrics"]
        out[label] = {
            "success@1": float(m["success_at_1"]),
            "success@5": float(m["success_at_5"]),
            "mrr@10": float(m["mrr_at_10"]),
            "ndcg@10": float(m["ndcg_at_10"]),
            "ms_per_query": round(per_query_ms, 1),
        }
    conn.close()
    return out


def bench_codegraph(dsn: str, quick: bool) -> dict[str, Any]:
    """The knowledge graph over kbpg's own source tree: build time with and without it,
    vertices and edges per second, and "where is X defined?" questions answered by hybrid
    search with the graph channel on and off (latency, and how often the definition's
    chunk comes first)."""
    import random

    import psycopg

    from kbpg.client import Client
    from kbpg.loaders import discover, load_file
    from kbpg.worker import Worker

    repo = Path(__file__).resolve().parent.parent
    files = discover([repo / "kbpg", repo / "plpython", repo / "tests"])
    docs = [load_file(f, root=repo) for f, _ in files]
    out: dict[str, Any] = {
        "workload": f"kbpg's own source tree ({len(docs)} files of kbpg/, plpython/, tests/), "
        "local MiniLM; questions 'where is NAME defined?' over its functions and classes"
    }
    kbs = {"plain": {}, "graph": {"knowledge_graph": {"enabled": True}}}
    with psycopg.connect(dsn, autocommit=True) as conn, Client(dsn) as client:
        for label, cfg in kbs.items():
            kb = f"bench-codegraph-{label}"
            conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (kb,))
            conn.execute("SELECT kb.create_knowledge_base(%s, %s)", (kb, json.dumps(cfg)))
            for doc in docs:
                client.put(kb, doc)
            _say(f"codegraph: indexing {kb}")
            t0 = time.perf_counter()
            Worker(dsn, concurrency=1, once=True, poll_interval=0.2).run()
            out[f"{label}_index_seconds"] = round(time.perf_counter() - t0, 1)
        ix = scalar(
            conn,
            "SELECT active_index_id FROM kb.knowledge_base WHERE name = 'bench-codegraph-graph'",
        )
        counts: Any = conn.execute(
            "SELECT count(*) FILTER (WHERE graph = 'code'), count(*) FROM kb.graph_node "
            "WHERE index_id = %s",
            (ix,),
        ).fetchone()
        t0 = time.perf_counter()
        resolved: Any = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE resolution IN ('same_file', 'import')), "
            "count(*) FILTER (WHERE resolution = 'name_only'), "
            "count(*) FILTER (WHERE resolution = 'external') FROM kb._graph_edges(kb._index_kb(%s), %s) e "
            "WHERE e.kind IN ('calls', 'imports', 'inherits', 'implements')",
            (ix, ix),
        ).fetchone()
        resolve_s = time.perf_counter() - t0
        edges = scalar(conn, "SELECT count(*) FROM kb._graph_edges(kb._index_kb(%s), %s)", (ix, ix))
        graph_cost = out["graph_index_seconds"] - out["plain_index_seconds"]
        out["vertices"] = {"code": counts[0], "all": counts[1]}
        out["edges"] = edges
        out["references"] = {
            "all": resolved[0], "same_file_or_import": resolved[1], "name_only": resolved[2],
            "external": resolved[3],
        }  # fmt: skip
        out["graph_build_seconds"] = round(graph_cost, 1)
        out["edges_per_second_of_build"] = round(edges / max(graph_cost, 0.1))
        out["resolve_all_references_ms"] = round(resolve_s * 1000, 1)
        targets = conn.execute(
            "SELECT DISTINCT ON (name) name, chunk_id FROM kb.graph_node WHERE index_id = %s "
            "AND kind IN ('function', 'class', 'method') AND length(name) > 5 "
            "AND name NOT LIKE 'test%%' AND name NOT LIKE '\\_%%' AND chunk_id IS NOT NULL "
            "AND (SELECT count(*) FROM kb.graph_node m WHERE m.index_id = %s AND m.name = "
            "graph_node.name AND m.kind <> 'file') = 1 ORDER BY name",
            (ix, ix),
        ).fetchall()
    random.Random(7).shuffle(targets)
    targets = targets[: 30 if quick else 100]
    conn = _fresh_search_conn(dsn)
    for label, weight in (("graph channel on", 0.5), ("graph channel off", 0.0)):
        times, first = [], 0
        for name, chunk in targets:
            t0 = time.perf_counter()
            top = conn.execute(
                "SELECT chunk_id FROM kb.search('bench-codegraph-graph', %s, graph_weight => %s)",
                (f"where is {name} defined?", weight),
            ).fetchall()
            times.append(time.perf_counter() - t0)
            first += bool(top) and top[0][0] == chunk
        out[label] = {**_lat(times[3:]), "definition_first": round(first / len(targets), 3)}
    conn.close()
    return out


# --- 6. startup -----------------------------------------------------------------------------
def _status_mb(status: str, field: str) -> float:
    """A memory field of /proc/PID/status (kB there) in MB."""
    return int(re.search(field + r":\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]


def bench_startup(dsn: str, quick: bool) -> dict[str, Any]:
    import psycopg

    times, rss, private = [], [], []
    for _ in range(3 if quick else 5):
        with psycopg.connect(dsn, autocommit=True) as conn:
            pid = scalar(conn, "SELECT pg_backend_pid()")
            t0 = time.perf_counter()
            conn.execute(
                "SELECT * FROM kb.search((SELECT name FROM kb.knowledge_base WHERE "
                "embedding_model = 'local/all-MiniLM-L6-v2' ORDER BY id LIMIT 1), "
                "'does vitamin D prevent fractures')"
            ).fetchall()
            times.append(time.perf_counter() - t0)
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                rss.append(_status_mb(status, "VmRSS"))
                # The process's own memory: RSS less shared libraries and shared buffers.
                private.append(_status_mb(status, "RssAnon"))
            except (OSError, AttributeError):
                pass
    return {
        "workload": "a new connection's first kb.search (hybrid, default model): PL/Python "
        "start, imports, model load, query embedding, search",
        "first_search_s": {
            "median": round(statistics.median(times), 3),
            "max": round(max(times), 3),
        },
        "backend_rss_mb_after_model_load": round(statistics.median(rss), 1) if rss else None,
        "backend_private_mb": round(statistics.median(private), 1) if private else None,
    }


def run_bench(args: argparse.Namespace) -> int:
    from kbpg.db import resolve_dsn

    dsn = resolve_dsn(args.dsn)
    repo_path("data")  # the data sets: a clone of the repository has them, a wheel does not
    groups = args.only.split(",") if args.only else list(GROUPS)
    unknown = set(groups) - {*GROUPS, *ON_REQUEST}
    if unknown:
        print(f"kbpg bench: unknown group(s) {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    sizes = [10_000, 20_000] if args.quick else [10_000, 100_000]
    if os.environ.get("KBPG_BENCH_1M"):
        sizes.append(1_000_000)
    results: dict[str, Any] = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, {platform.platform()}",
        "quick": bool(args.quick),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    runners = {
        "quality": lambda: bench_quality(dsn, args.quick),
        "bm25": lambda: bench_bm25(dsn, args.quick),
        "hybrid": lambda: bench_hybrid(dsn, args.quick, sizes),
        "hnsw": lambda: bench_hnsw(dsn, args.quick),
        "rls": lambda: bench_rls(dsn, args.quick),
        "graph": lambda: bench_graph(dsn, args.quick),
        "docs": lambda: bench_docs(dsn, args.quick),
        "codegraph": lambda: bench_codegraph(dsn, args.quick),
        "ingest": lambda: bench_ingest(dsn, args.quick),
        "startup": lambda: bench_startup(dsn, args.quick),
        "scale": lambda: bench_scale(dsn, args.quick),
    }
    for group in groups:
        _say(f"== {group}")
        t0 = time.monotonic()
        results[group] = runners[group]()
        results[group]["bench_seconds"] = round(time.monotonic() - t0, 1)
        print_group(group, results[group])
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {out}")
    return 0


def print_group(name: str, data: dict[str, Any]) -> None:
    print(f"\n[{name}] {data.get('workload', '')}")
    for key, value in data.items():
        if key == "workload":
            continue
        print(f"  {key:28s} {json.dumps(value) if isinstance(value, dict) else value}")
