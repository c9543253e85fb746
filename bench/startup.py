"""startup: the first search on a fresh connection; memory per server process."""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path
from typing import Any

from kbpg.db import scalar


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
