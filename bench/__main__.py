"""`make bench` (`python -m bench`): quality, speed and scale figures in one run.

Every figure names its workload; one module per group. A run prints each group as it
ends, writes the run to bench/results/latest.json (or --output), appends it to
bench/results/history.jsonl, and rewrites bench/RESULTS.md: each group's latest figures,
with the date and machine they were measured on.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import say

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
GROUPS = (
    "quality",
    "bm25",
    "hybrid",
    "hnsw",
    "rls",
    "graph",
    "docs",
    "codegraph",
    "ingest",
    "sync",
    "connections",
    "ocr",
)
# Only with --only: building the 1M-chunk KB takes about an hour on 2 cores.
ON_REQUEST = ("scale",)


def run_group(name: str, dsn: str, quick: bool, sizes: list[int]) -> dict[str, Any]:
    module = importlib.import_module(f"bench.{name}")
    runner = getattr(module, f"bench_{name}")
    if name == "hybrid":
        return runner(dsn, quick, sizes)
    return runner(dsn, quick)


def print_group(name: str, data: dict[str, Any]) -> None:
    print(f"\n[{name}] {data.get('workload', '')}")
    for key, value in data.items():
        if key == "workload":
            continue
        print(f"  {key:28s} {json.dumps(value) if isinstance(value, dict) else value}")


def history() -> list[dict[str, Any]]:
    path = RESULTS / "history.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _rows(prefix: str, value: Any) -> list[tuple[str, str]]:
    """A figure as table rows: nested groups flattened to "set › configuration › measure"."""
    if isinstance(value, dict):
        return [r for k, v in value.items() for r in _rows(f"{prefix} › {k}" if prefix else k, v)]
    if isinstance(value, list):
        return [(prefix, ", ".join(str(v) for v in value))]
    return [(prefix, f"{value:.4g}" if isinstance(value, float) else str(value))]


def figures_table(run: dict[str, Any], data: dict[str, Any]) -> list[str]:
    """A group's figures as Markdown: its workload, when and where, a row a figure."""
    out = [
        f"{data.get('workload', '')}",
        "",
        f"Measured {run['started']} on {run['machine']}.",
        "",
        "| figure | value |",
        "|---|---|",
    ]
    return out + [
        f"| {k} | {v} |"
        for key, value in data.items()
        if key != "workload"
        for k, v in _rows(key, value)
    ]


def write_results_md(runs: list[dict[str, Any]]) -> Path:
    """bench/RESULTS.md: for each group, the figures of the latest full run that had it."""
    latest: dict[str, dict[str, Any]] = {}
    for run in runs:
        if run.get("quick"):
            continue
        for group in (*GROUPS, *ON_REQUEST):
            if group in run:
                latest[group] = {"run": run, "data": run[group]}
    out = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`python -m bench`) from `bench/results/history.jsonl`: each "
        "group's figures from the latest full run that measured it. `python -m bench --only "
        "GROUP` reruns one group. docs/performance.md explains the figures.",
    ]
    for group in (*GROUPS, *ON_REQUEST):
        if group in latest:
            out += ["", f"## {group}", ""]
            out += figures_table(latest[group]["run"], latest[group]["data"])
    path = HERE / "RESULTS.md"
    path.write_text("\n".join(out) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", help="the database (default: the embedded cluster)")
    parser.add_argument("--quick", action="store_true", help="a reduced run (under 5 minutes)")
    parser.add_argument("--output", help="where the run's JSON goes (bench/results/latest.json)")
    parser.add_argument(
        "--only",
        help=f"comma-separated groups: {', '.join(GROUPS)}; and scale (the 1M-chunk point, "
        "about an hour to build; not in the default run)",
    )
    args = parser.parse_args(argv)
    from kbpg.db import resolve_dsn

    groups = args.only.split(",") if args.only else list(GROUPS)
    unknown = set(groups) - {*GROUPS, *ON_REQUEST}
    if unknown:
        print(f"python -m bench: unknown group(s) {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    dsn = resolve_dsn(args.dsn)
    sizes = [10_000, 20_000] if args.quick else [10_000, 100_000]
    if os.environ.get("KBPG_BENCH_1M"):
        sizes.append(1_000_000)
    results: dict[str, Any] = {
        "machine": f"{platform.node()} {os.cpu_count()} cores, {platform.platform()}",
        "quick": bool(args.quick),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for group in groups:
        say(f"== {group}")
        t0 = time.monotonic()
        results[group] = run_group(group, dsn, args.quick, sizes)
        results[group]["bench_seconds"] = round(time.monotonic() - t0, 1)
        print_group(group, results[group])
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = Path(args.output) if args.output else RESULTS / "latest.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    with (RESULTS / "history.jsonl").open("a") as fh:
        fh.write(json.dumps(results) + "\n")
    md = write_results_md(history())
    print(f"\nwritten: {out}, {RESULTS / 'history.jsonl'}, {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
