"""compare: kb.search latency of two databases on one machine, their queries alternating.

A single latency figure moves with the machine's speed at the time (this VM class drifts
by ±20% between minutes), so a change's cost is measured against the code before it on
the same machine: each of the 200 SciFact queries runs on one database, then on the
other, in three rounds whose order alternates, after a first pass that warms both
backends. The two databases are usually two clusters (``kbpg up`` in two checkouts) each
holding the hybrid group's KB (``make bench ONLY=hybrid`` in each)::

    python -m bench.compare "$(cd ../before && .venv/bin/kbpg dsn)" "$(.venv/bin/kbpg dsn)"

Prints each database's p50 and p95, and the second's p50 as a share of the first's.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.common import bench_queries, lat


def compare(
    dsns: list[str], kb: str, options: dict[str, Any], queries: int, rounds: int
) -> dict[str, Any]:
    import psycopg

    qs = bench_queries(queries)
    conns = [psycopg.connect(d, autocommit=True) for d in dsns]
    sql = "SELECT * FROM kb.search(%s, %s, options => %s::jsonb)"
    args = json.dumps(options)
    try:
        for c in conns:  # the first pass fills each backend's model and posting cache
            for q in qs:
                c.execute(sql, (kb, q, args)).fetchall()
        times: list[list[float]] = [[] for _ in conns]
        for r in range(rounds):
            order = list(range(len(conns)))
            if r % 2:
                order.reverse()
            for q in qs:
                for i in order:
                    t0 = time.perf_counter()
                    conns[i].execute(sql, (kb, q, args)).fetchall()
                    times[i].append(time.perf_counter() - t0)
    finally:
        for c in conns:
            c.close()
    out: dict[str, Any] = {"first": lat(times[0]), "second": lat(times[1])}
    out["second_p50_share"] = round(out["second"]["p50_ms"] / out["first"]["p50_ms"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.compare", description=(__doc__ or "").split("\n")[0]
    )
    ap.add_argument("first", help="DSN of the database measured first (the code before)")
    ap.add_argument("second", help="DSN of the other database (the code after)")
    ap.add_argument("--kb", default="bench-syn2-100000", help="KB searched in both")
    ap.add_argument("--options", default="{}", help="kb.search options, JSON (default: none)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    try:
        options = json.loads(a.options)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--options is not JSON: {exc}") from None
    if not isinstance(options, dict):
        raise SystemExit("--options must be a JSON object")
    if a.queries < 1 or a.rounds < 1:
        raise SystemExit("--queries and --rounds must be at least 1")
    print(json.dumps(compare([a.first, a.second], a.kb, options, a.queries, a.rounds), indent=2))


if __name__ == "__main__":
    main()
