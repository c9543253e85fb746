"""bm25: BM25 speed at 100k chunks against ts_rank_cd over the same match set."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.common import bench_queries, build_synthetic_kb, lat
from kbpg.db import scalar


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
    k, b = lat(kbpg_t[len(queries) :]), lat(base_t[len(queries) :])
    return {
        "workload": f"{n} chunks of 3 recombined SciFact sentences each; {len(queries)} SciFact "
        "queries (OR of their lexemes), top 10; second pass (warm caches)",
        "kbpg_bm25": k,
        "kbpg_bm25_top100": lat(depth_t[len(queries) :]),
        "kbpg_bm25_first_pass": lat(kbpg_t[: len(queries)]),
        "posting_cache": dict(zip(("terms", "megabytes", "hits", "misses"), cache, strict=False)),
        "sql_scorer": lat(sql_t[len(queries) :]),
        "sql_scorer_top100": lat(sql_depth_t[len(queries) :]),
        "exhaustive_bm25": lat(full_t[len(queries) :]),
        "sql_terms_pruned_mean": round(statistics.mean(cut), 3) if cut else None,
        "ts_rank_cd": b,
        "median_match_set": int(statistics.median(matches)),
        "ratio_p50": round(k["p50_ms"] / b["p50_ms"], 3),
        "ratio_p95": round(k["p95_ms"] / b["p95_ms"], 3),
        "target": "ratio <= 1.0; p50 <= 5 ms at 100k chunks",
    }
