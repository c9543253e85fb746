"""rls: what row-level security costs a search."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from bench.common import bench_queries, build_synthetic_kb, fresh_search_conn, lat
from kbpg.db import scalar

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
    owner = fresh_search_conn(dsn)
    member.execute("SELECT kb.embed_query(%s, 'warm up')", (small,))
    for method in ("full_text", "hybrid"):
        for label, c in (("owner", owner), ("member", member)):
            times = []
            for q in words:
                t0 = time.perf_counter()
                c.execute("SELECT * FROM kb.search(%s, %s, method => %s)", (small, q, method))
                times.append(time.perf_counter() - t0)
            out[f"{method}_{label}"] = lat(times[5:])
    owner.close()
    member.close()
    return out
