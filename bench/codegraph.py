"""codegraph: the knowledge graph over kbpg's own source tree."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.common import fresh_search_conn, lat, say
from kbpg.db import scalar


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
            say(f"codegraph: indexing {kb}")
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
    conn = fresh_search_conn(dsn)
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
        out[label] = {**lat(times[3:]), "definition_first": round(first / len(targets), 3)}
    conn.close()
    return out
