"""connections: what searching connections cost the server, side by side with the query
model in each backend (kb.embed_service = off) and in the server's embedding process."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from kbpg_db.embedservice import private_mb

from bench.common import bench_queries, build_synthetic_kb, lat, say
from kbpg.db import scalar

KB = "bench-syn2-10000"


def service_pids(data_dir: str) -> list[int]:
    """The embedding processes of the cluster in ``data_dir``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if b"embedservice.main()" in cmd and os.path.realpath(cwd) == os.path.realpath(data_dir):
            pids.append(int(entry))
    return pids


def _round(n_conns: int, dsn: str, service: str, queries: list[str], per_conn: int) -> dict:
    import psycopg

    conns, first, times = [], [], []
    try:
        for i in range(n_conns):
            conn = psycopg.connect(dsn, autocommit=True)
            conns.append(conn)
            conn.execute("SELECT set_config('kb.embed_service', %s, false)", (service,))
            t0 = time.perf_counter()
            conn.execute("SELECT * FROM kb.search(%s, %s)", (KB, queries[i % len(queries)]))
            first.append(time.perf_counter() - t0)
        for r in range(per_conn):
            for i, conn in enumerate(conns):
                q = queries[(i * per_conn + r + 1) % len(queries)]
                t0 = time.perf_counter()
                conn.execute("SELECT * FROM kb.search(%s, %s)", (KB, q)).fetchall()
                times.append(time.perf_counter() - t0)
        backends = [private_mb(c.info.backend_pid) for c in conns]
    finally:
        for c in conns:
            c.close()
    return {
        "first_search": lat(first),
        "search": lat(times),
        "backend_private_mb": {
            "median": round(statistics.median(backends), 1),
            "max": round(max(backends), 1),
            "sum": round(sum(backends), 1),
        },
    }


def bench_connections(dsn: str, quick: bool) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        build_synthetic_kb(conn, KB, 10_000)
        data_dir = str(scalar(conn, "SELECT current_setting('data_directory')"))
        max_conns = int(scalar(conn, "SHOW max_connections"))
    queries = bench_queries(200)
    per_conn = 3 if quick else 5
    out: dict[str, Any] = {
        "workload": f"N connections each open, then a hybrid kb.search on each (its first), "
        f"then {per_conn} more on each, round robin ({KB}, SciFact questions); private "
        "memory from /proc/PID/smaps_rollup after the searches. in_backend: the query "
        "model in each backend (kb.embed_service = off, as before the embedding process); "
        "service: in the server's embedding process",
    }
    # The first search that starts the embedding process (it loads the model once).
    for pid in service_pids(data_dir):
        os.kill(pid, 15)
    time.sleep(0.5)
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        conn.execute("SELECT * FROM kb.search(%s, %s)", (KB, queries[0]))
        out["first_search_starting_the_process_s"] = round(time.perf_counter() - t0, 3)
    pids = service_pids(data_dir)
    sizes = [10] if quick else [10, 50, 100]
    sizes = [n for n in sizes if n < max_conns - 5]
    # Side by side, alternating, at 10 connections: the backends' own model, and the
    # process (10 backends with their own model hold about 2 GB).
    for service in ("off", "on", "off", "on"):
        say(f"connections: 10 connections, kb.embed_service = {service}")
        key = "in_backend_10" if service == "off" else "service_10"
        got = _round(10, dsn, service, queries, per_conn)
        out.setdefault(key, []).append(got)
    for key in ("in_backend_10", "service_10"):
        runs = out.pop(key)
        out[key] = runs[-1]
        out[key]["search_p50_ms_each_round"] = [r["search"]["p50_ms"] for r in runs]
    for n in sizes:
        if n == 10:
            continue
        say(f"connections: {n} connections, kb.embed_service = on")
        out[f"service_{n}"] = _round(n, dsn, "on", queries, per_conn)
    pids = service_pids(data_dir)
    out["service_process_private_mb"] = round(sum(private_mb(p) for p in pids), 1)
    for n in sizes:
        key = f"service_{n}"
        out[key]["server_private_mb"] = round(
            out[key]["backend_private_mb"]["sum"] + out["service_process_private_mb"], 1
        )
    out["in_backend_10"]["server_private_mb"] = out["in_backend_10"]["backend_private_mb"]["sum"]
    out["search_p50_ratio_service_vs_in_backend"] = round(
        statistics.median(out["service_10"]["search_p50_ms_each_round"])
        / statistics.median(out["in_backend_10"]["search_p50_ms_each_round"]),
        2,
    )
    out["targets"] = {
        "backend_private_mb": "<= 60",
        "first_search_ms": "<= 150",
        "search_p50_ratio": "<= 1.1",
    }
    return out
