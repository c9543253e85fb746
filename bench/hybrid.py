"""hybrid: kb.search latency at 10k and 100k chunks, the query embedded in the database."""

from __future__ import annotations

import time
from typing import Any

from bench.common import bench_queries, build_synthetic_kb, fresh_search_conn, lat


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
        conn = fresh_search_conn(dsn)
        times = []
        for q in queries * 2:  # a new backend: the first pass fills its posting cache
            t0 = time.perf_counter()
            conn.execute("SELECT * FROM kb.search(%s, %s)", (f"bench-syn2-{n}", q)).fetchall()
            times.append(time.perf_counter() - t0)
        conn.close()
        out[str(n)] = lat(times[len(queries) :])
        out[f"{n}_first_pass"] = lat(times[5 : len(queries)])
    out["targets"] = {"100000": "p50 <= 15 ms, p95 <= 40 ms", "1000000": "p50 <= 60 ms"}
    return out
