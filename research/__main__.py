"""`make research` (`python -m research`): the directions of research/directions.py replayed
on the four evaluation sets beside kbpg's defaults.

Writes the run to research/results/latest.json, appends it to
research/results/history.jsonl and rewrites research/RESULTS.md from the latest run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def write_results_md(run: dict[str, Any]) -> Path:
    from bench.__main__ import figures_table

    out = [
        "# Research results",
        "",
        "Written by `make research` (`python -m research`) from its latest run.",
        "README.md explains the directions; docs/decisions.md what was decided.",
        "",
        *figures_table(run, run["directions"]),
    ]
    path = HERE / "RESULTS.md"
    path.write_text("\n".join(out) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research", description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", help="the database (default: the embedded cluster)")
    parser.add_argument("--quick", action="store_true", help="fewer questions per set")
    args = parser.parse_args(argv)
    from bench.common import say
    from kbpg.db import resolve_dsn
    from research.directions import bench_directions

    run: dict[str, Any] = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, {platform.platform()}",
        "quick": bool(args.quick),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    say("== directions")
    t0 = time.monotonic()
    run["directions"] = bench_directions(resolve_dsn(args.dsn), args.quick)
    run["directions"]["research_seconds"] = round(time.monotonic() - t0, 1)
    for key, value in run["directions"].items():
        print(f"  {key:28s} {json.dumps(value) if isinstance(value, dict) else value}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(run, indent=2))
    with (RESULTS / "history.jsonl").open("a") as fh:
        fh.write(json.dumps(run) + "\n")
    written = [RESULTS / "latest.json", RESULTS / "history.jsonl"]
    if not args.quick:
        written.append(write_results_md(run))
    print("\nwritten: " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
