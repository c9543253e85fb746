"""scale (on request): the 1M-chunk point, and a small KB beside a large one."""

from __future__ import annotations

import os
import time
from typing import Any

from bench.common import bench_queries, build_synthetic_kb, say, search_latency
from kbpg.db import scalar


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
        say(f"scale: {small_kb} before {big_kb} exists")
        out[f"{small}_before"] = search_latency(dsn, small_kb, queries)
    t0 = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        build_synthetic_kb(conn, big_kb, big)
    if have_big != big:
        out["build_seconds"] = round(time.monotonic() - t0, 1)
    say(f"scale: {big_kb}")
    out[str(big)] = search_latency(dsn, big_kb, queries)
    say(f"scale: {small_kb} beside {big_kb}")
    out[f"{small}_beside_{big}"] = search_latency(dsn, small_kb, queries)
    out["targets"] = {
        "1000000": "hybrid p50 <= 60 ms, BM25 p50 <= 25 ms",
        "isolation": "the small KB's figures beside the large one equal its figures before",
    }
    return out
