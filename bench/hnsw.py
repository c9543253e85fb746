"""hnsw: HNSW recall@10 against exact search on synthetic vectors."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from bench.common import bench_queries, build_synthetic_kb
from kbpg.db import scalar


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
