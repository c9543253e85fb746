"""`kbpg eval`: retrieval quality on a BEIR-format dataset, through kb.search.

Each corpus entry becomes one document (``title + "\\n" + text``, titled by its ``_id``);
a query's ranked documents are its ranked chunks with each document kept at its best
rank. Metrics follow the BEIR definitions with binary relevance.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbpg.errors import KbpgError

# A BEIR document is its title, a newline, then its text: the chunker is told so.
EVAL_CONFIG: dict[str, Any] = {"title_line": True}

# BEIR's own protocol: every corpus entry is one passage; the embedding model reads its
# first 256 word pieces (an explicit opt-in to truncation).
WHOLE_DOCUMENTS: dict[str, Any] = {
    "chunker": "recursive",
    "chunk_size": 8000,
    "chunk_overlap": 0,
    "truncate_for_embedding": True,
}


@dataclass
class Dataset:
    name: str
    corpus: dict[str, tuple[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(folder: Path, split: str = "test") -> Dataset:
    folder = Path(folder)
    for need in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (folder / need).is_file():
            raise KbpgError(f"{folder} is not a BEIR dataset: {need} is missing")
    corpus: dict[str, tuple[str, str]] = {}
    with (folder / "corpus.jsonl").open() as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                corpus[str(d["_id"])] = (d.get("title") or "", d.get("text") or "")
    qrels: dict[str, dict[str, int]] = {}
    with (folder / "qrels" / f"{split}.tsv").open() as f:
        for i, line in enumerate(f):
            parts = line.strip().split("\t")
            if len(parts) < 3 or (i == 0 and not parts[2].lstrip("-").isdigit()):
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries: dict[str, str] = {}
    with (folder / "queries.jsonl").open() as f:
        for line in f:
            if line.strip():
                q = json.loads(line)
                if str(q["_id"]) in qrels:
                    queries[str(q["_id"])] = q["text"]
    return Dataset(folder.name, corpus, queries, qrels)


def ndcg_at(ranked: list[str], rel: dict[str, int], k: int) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if rel.get(d, 0) > 0)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, sum(1 for v in rel.values() if v > 0))))
    return dcg / ideal if ideal else 0.0


def recall_at(ranked: list[str], rel: dict[str, int], k: int) -> float:
    relevant = {d for d, v in rel.items() if v > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: list[str], rel: dict[str, int], k: int) -> float:
    for i, d in enumerate(ranked[:k]):
        if rel.get(d, 0) > 0:
            return 1 / (i + 1)
    return 0.0


def metrics(runs: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    n = len(runs) or 1
    return {
        "ndcg@10": sum(ndcg_at(r, qrels[q], 10) for q, r in runs.items()) / n,
        "recall@10": sum(recall_at(r, qrels[q], 10) for q, r in runs.items()) / n,
        "recall@100": sum(recall_at(r, qrels[q], 100) for q, r in runs.items()) / n,
        "mrr@10": sum(mrr_at(r, qrels[q], 10) for q, r in runs.items()) / n,
    }


def _bar(total: int, unit: str, desc: str) -> Any:
    from kbpg.cli import progress_bar

    return progress_bar(total, unit, desc)


def ensure_loaded(
    client: Any,
    dsn: str,
    kb: str,
    data: Dataset,
    concurrency: int = 2,
    indexing_config: dict[str, Any] | None = None,
    quiet: bool = False,
) -> float:
    """Load the corpus into ``kb`` (reusing it when complete) and index it. Returns seconds."""
    from kbpg.worker import Worker

    say = (lambda *_: None) if quiet else (lambda m: print(m, file=sys.stderr))
    existing = {r["name"] for r in client.list_knowledge_bases()}
    if kb not in existing:
        client.create_knowledge_base(
            kb, indexing_config or {}, description=f"BEIR {data.name} corpus"
        )
    rows = client.conn.execute(
        "SELECT documents, ready FROM kb.list_knowledge_bases() WHERE name = %s", (kb,)
    ).fetchone()
    if rows[0] == len(data.corpus) and rows[1] == len(data.corpus):
        say(f"reusing knowledge base {kb!r} ({rows[0]} documents, all ready)")
        return 0.0
    t0 = time.monotonic()
    if rows[0] < len(data.corpus):
        say(f"loading {len(data.corpus)} documents into {kb!r}")
        with client.conn.transaction(), client.conn.cursor() as cur:
            cur.executemany(
                "SELECT kb.put_document(%s, %s, %s, %s::jsonb)",
                [
                    (kb, doc_id, f"{title}\n{text}", json.dumps({"beir_id": doc_id}))
                    for doc_id, (title, text) in data.corpus.items()
                ],
            )
    import logging
    import threading

    logging.getLogger("kbpg.worker").setLevel(logging.WARNING)  # the bar shows progress
    worker = Worker(dsn, concurrency=concurrency, once=True, poll_interval=0.5)

    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    bar = _bar(len(data.corpus), "doc", "indexing")
    done = 0
    while thread.is_alive():
        thread.join(2.0)
        ready = client.conn.execute(
            "SELECT ready + failed FROM kb.list_knowledge_bases() WHERE name = %s", (kb,)
        ).fetchone()[0]
        if bar is not None:
            bar.update(ready - done)
        done = ready
    if bar is not None:
        bar.close()
    seconds = time.monotonic() - t0
    errors = client.conn.execute(
        "SELECT failed FROM kb.list_knowledge_bases() WHERE name = %s", (kb,)
    ).fetchone()[0]
    say(f"indexed {len(data.corpus)} documents in {seconds:.0f}s ({errors} errors)")
    return seconds


def rank_documents(results: list[Any]) -> list[str]:
    """Documents in the order of their best chunk."""
    seen: dict[str, None] = {}
    for r in results:
        seen.setdefault(r.title, None)
    return list(seen)


def evaluate(
    client: Any,
    kb: str,
    data: Dataset,
    method: str,
    top_k: int = 100,
    options: dict[str, Any] | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    options = dict(options or {})
    # Several chunks can belong to one document: fetch enough chunks for top_k documents.
    chunk_k = min(1000, top_k * 3)
    if method == "tree_search":  # the LLM names at most top_k sections
        chunk_k = top_k
    if method == "hybrid":
        options.setdefault("fusion_depth", max(chunk_k, 100))
    runs: dict[str, list[str]] = {}
    latencies: list[float] = []
    bar = _bar(len(data.queries), "query", method) if show_progress else None
    for qid, text in data.queries.items():
        t0 = time.perf_counter()
        results = client.search(kb, text, method=method, top_k=chunk_k, **options)
        latencies.append(time.perf_counter() - t0)
        runs[qid] = rank_documents(results)[:top_k]
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    out: dict[str, Any] = {"method": method, "queries": len(runs), **metrics(runs, data.qrels)}
    latencies.sort()
    out["latency_p50_ms"] = 1000 * latencies[len(latencies) // 2] if latencies else None
    out["options"] = options
    return out


def run_eval(args: argparse.Namespace) -> int:
    from kbpg.client import Client
    from kbpg.db import resolve_dsn

    data = load_beir(Path(args.dataset_dir), args.split)
    dsn = resolve_dsn(args.dsn)
    kb = args.kb or f"beir-{data.name}"
    options: dict[str, Any] = {}
    for item in args.option or []:
        key, _, value = item.partition("=")
        options[key] = json.loads(value)
    if args.rerank:
        options["rerank"] = True
    icfg: dict[str, Any] = dict(EVAL_CONFIG)
    if args.indexing_config:
        icfg.update(json.loads(args.indexing_config))
    if args.whole_documents:
        icfg = {**WHOLE_DOCUMENTS, **icfg}
        kb = args.kb or f"beir-{data.name}-whole"
    with Client(dsn) as client:
        ensure_loaded(
            client,
            dsn,
            kb,
            data,
            concurrency=args.concurrency,
            quiet=args.json,
            indexing_config=icfg,
        )
        result = evaluate(
            client, kb, data, args.method, args.top_k, options, show_progress=not args.json
        )
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{data.name} ({args.split}, {result['queries']} queries), method {args.method}"
            + (f", options {options}" if options else "")
        )
        for key in ("ndcg@10", "recall@10", "recall@100", "mrr@10"):
            print(f"  {key:11s} {result[key]:.4f}")
        print(f"  latency p50 {result['latency_p50_ms']:.1f} ms")
    return 0
