"""docs: the documentation sets (data/docs-pg, data/docs-python, data/docs-node), every method
and fusion setting."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.common import fresh_search_conn, say
from kbpg.resources import repo_path


def docs_dir(name: str = "docs-pg") -> Path:
    return repo_path("data", name)


# The documentation sets: the PostgreSQL manual with questions that mostly carry a word of
# their answer, and the Python library reference (HTML) and Node.js API reference
# (Markdown) with questions that name none of theirs.
DOCS_SETS = {
    "docs-pg": "PostgreSQL 15 manual pages, developer questions",
    "docs-python": "Python 3.11 library reference pages, paraphrased questions",
    "docs-node": "Node.js 20 API reference in Markdown, paraphrased questions",
}

# Retrieval settings scored on the documentation sets: the channels alone, then fusion.
DOCS_RUNS: list[tuple[str, dict[str, Any]]] = [
    ("vector", {"method": "vector"}),
    ("full_text (defaults: term_expansion 16)", {"method": "full_text"}),
    (
        "full_text term_expansion 0 (the query's words only)",
        {"method": "full_text", "term_expansion": 0},
    ),
    ("hybrid (defaults: zscore, vector_weight 0.5, plain_query_shift 0.2)", {}),
    ("hybrid plain_query_shift 0", {"plain_query_shift": 0}),
    ("hybrid zscore vector_weight 0.3", {"vector_weight": 0.3, "plain_query_shift": 0}),
    ("hybrid zscore vector_weight 0.7", {"vector_weight": 0.7, "plain_query_shift": 0}),
    ("hybrid rrf (rrf_k 60)", {"fusion": "rrf"}),
    ("hybrid rrf rrf_k 10", {"fusion": "rrf", "rrf_k": 10}),
]


def bench_docs(dsn: str, quick: bool) -> dict[str, Any]:
    """Each documentation set (data/docs-pg, data/docs-python, data/docs-node): its pages through
    kb.add_file, its questions with a gold section each, every method and fusion setting
    scored with kb.run_test_set (Success@1/@5, MRR@10, nDCG@10), and search latency."""
    out: dict[str, Any] = {
        "workload": "; ".join(f"{k}: {v}" for k, v in DOCS_SETS.items())
        + "; local MiniLM, markdown_header chunks of 200 tokens"
    }
    for name in DOCS_SETS:
        out[name] = _bench_docs_set(dsn, name, quick)
    return out


def doc_pages(name: str) -> list[Path]:
    """A documentation set's pages: html/*.html or md/*.md."""
    folder = docs_dir(name)
    return sorted([*folder.glob("html/*.html"), *folder.glob("md/*.md")])


def docs_questions(name: str) -> list[dict[str, Any]]:
    """A documentation set's questions: query, expected sections (and the needle word)."""
    lines = (docs_dir(name) / "questions.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def ensure_docs_kb(dsn: str, name: str) -> dict[str, Any]:
    """The KB ``bench-NAME`` of a documentation set, built from its pages unless it holds
    them all, with the set's questions as its test set ``docs``: its pages, questions,
    chunks, failed pages (and indexing seconds where it was built)."""
    import psycopg

    from kbpg.worker import Worker

    pages = doc_pages(name)
    questions = docs_questions(name)
    kb = f"bench-{name}"
    out: dict[str, Any] = {"pages": len(pages), "questions": len(questions)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        # kb.list_documents, not the view by name: planned for this KB, not an average one
        # (a scan of every document beside the scale group's 1M-chunk KB).
        built = conn.execute(
            "SELECT count(*) FILTER (WHERE d.status = 'ready') FROM kb.knowledge_base k, "
            "kb.list_documents(k.name) d WHERE k.name = %s",
            (kb,),
        ).fetchone()
        if not built or built[0] != len(pages):
            conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (kb,))
            conn.execute("SELECT kb.create_knowledge_base(%s)", (kb,))
            for page in pages:
                conn.execute("SELECT kb.add_file(%s, %s, %s)", (kb, page.name, page.read_bytes()))
            say(f"{name}: indexing {len(pages)} pages")
            t0 = time.perf_counter()
            Worker(dsn, concurrency=2, once=True, poll_interval=0.2).run()
            out["index_seconds"] = round(time.perf_counter() - t0, 1)
        chunks: Any = conn.execute(
            "SELECT sum(chunk_count), count(*) FILTER (WHERE status = 'error') "
            "FROM kb.list_documents(%s)",
            (kb,),
        ).fetchone()
        out["chunks"], out["failed_pages"] = int(chunks[0] or 0), int(chunks[1] or 0)
        # The vocabulary's vectors for full_text's term expansion (kept while the KB is).
        conn.execute("SELECT * FROM kb.refresh_term_vectors(%s)", (kb,))
        conn.execute(
            "SELECT kb.delete_test_set(%s, 'docs') FROM kb.test_sets(%s) WHERE name = 'docs'",
            (kb, kb),
        )
        conn.execute("SELECT kb.create_test_set(%s, 'docs')", (kb,))
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "SELECT kb.add_test_query(%s, 'docs', %s, %s)",
                [(kb, q["query"], q["expected"]) for q in questions],
            )
    return out


def _bench_docs_set(dsn: str, name: str, quick: bool) -> dict[str, Any]:
    kb = f"bench-{name}"
    out = ensure_docs_kb(dsn, name)
    n_questions = out["questions"]
    conn = fresh_search_conn(dsn)
    for label, options in DOCS_RUNS[: 4 if quick else None]:
        say(f"{name}: {label}")
        t0 = time.perf_counter()
        run: Any = conn.execute(
            "SELECT kb.run_test_set(%s, 'docs', %s::jsonb, save => false)",
            (kb, json.dumps(options)),
        ).fetchone()
        run = run[0]
        per_query_ms = (time.perf_counter() - t0) * 1000 / n_questions
        m = run["metrics"]
        out[label] = {
            "success@1": float(m["success_at_1"]),
            "success@5": float(m["success_at_5"]),
            "mrr@10": float(m["mrr_at_10"]),
            "ndcg@10": float(m["ndcg_at_10"]),
            "ms_per_query": round(per_query_ms, 1),
        }
    conn.close()
    return out
