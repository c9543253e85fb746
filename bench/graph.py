"""graph: GraphIndex against ChunkEmbed on one corpus."""

from __future__ import annotations

import json
import time
from typing import Any

from bench.common import fresh_search_conn, lat, say, scifact_dir


def handbooks(data: Any, per_book: int = 8) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """SciFact abstracts as numbered sections of Markdown handbooks ("## 3.2 <title>"), each
    section but the first referring to the one before ("See Section 3.1."). Returns the
    documents and a section-title -> SciFact id map for scoring."""
    docs: list[tuple[str, str]] = []
    by_title: dict[str, str] = {}
    items = list(data.corpus.items())
    for b in range(0, len(items), per_book):
        n = b // per_book + 1
        parts = [f"# Handbook {n}\n"]
        for k, (doc_id, (title, text)) in enumerate(items[b : b + per_book], start=1):
            head = f"{n}.{k} {title.strip()}"
            by_title[head] = doc_id
            see = f" See Section {n}.{k - 1}." if k > 1 else ""
            parts.append(f"## {head}\n{text.strip()}{see}\n")
        docs.append((f"handbook-{n}", "\n".join(parts)))
    return docs, by_title


def bench_graph(dsn: str, quick: bool) -> dict[str, Any]:
    """GraphIndex (rules only: no LLM here) and ChunkEmbed over the same Markdown corpus:
    build time, search latency with and without expansion, and SciFact quality."""
    import psycopg

    from kbpg.evaluate import load_beir, metrics
    from kbpg.worker import Worker

    data = load_beir(scifact_dir(), "test")
    keep_q = dict(list(data.queries.items())[: 50 if quick else 300])
    judged = {d for q in keep_q for d in data.qrels[q] if d in data.corpus}
    rest = [d for d in data.corpus if d not in judged][: 200 if quick else 700]
    data.corpus = {d: data.corpus[d] for d in [*sorted(judged), *rest]}
    docs, by_title = handbooks(data)
    out: dict[str, Any] = {
        "workload": f"{len(data.corpus)} SciFact abstracts as numbered sections of {len(docs)} "
        f"Markdown handbooks, {len(keep_q)} SciFact queries; local MiniLM; GraphIndex with "
        "enrichment rules (no LLM: a section is embedded from its own text)"
    }
    kbs = {
        "chunk_embed": {"title_line": False},
        "graph_index": {"strategy": "graph_index", "extra": {"enrichment": "rules"}},
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, cfg in kbs.items():
            kb = f"bench-graph-{name}"
            conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (kb,))
            conn.execute("SELECT kb.create_knowledge_base(%s, %s)", (kb, json.dumps(cfg)))
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany("SELECT kb.add_document(%s, %s, %s)", [(kb, t, x) for t, x in docs])
            say(f"graph: indexing {kb}")
            t0 = time.perf_counter()
            Worker(dsn, concurrency=1, once=True, poll_interval=0.2).run()
            row: Any = conn.execute(
                "SELECT count(*) FROM kb.chunk c JOIN kb.knowledge_base k "
                "ON k.active_index_id = c.index_id WHERE k.name = %s",
                (kb,),
            ).fetchone()
            out[name] = {"index_seconds": round(time.perf_counter() - t0, 1), "chunks": row[0]}
        edges: Any = conn.execute(
            "SELECT sum(rule_edges), sum(llm_edges) FROM kb.graph_index_documents "
            "WHERE kb = 'bench-graph-graph_index'"
        ).fetchone()
        out["graph_index"]["edges"] = {"rule": int(edges[0] or 0), "llm": int(edges[1] or 0)}
    conn = fresh_search_conn(dsn)
    runs_for = [
        ("chunk_embed", "hybrid", {}),
        ("chunk_embed", "full_text", {}),
        ("graph_index", "hybrid", {"reference_expansion": False}),
        ("graph_index", "hybrid", {}),
        ("graph_index", "full_text", {}),
    ]
    for name, method, extra in runs_for:
        kb = f"bench-graph-{name}"
        label = f"{name} {method}" + (" +expansion" if name == "graph_index" and not extra else "")
        say(f"graph: {label}")
        times, runs = [], {}
        for qid, text in keep_q.items():
            t0 = time.perf_counter()
            rows = conn.execute(
                "SELECT heading_path, expanded_from FROM kb.search(%s, %s, method => %s, "
                "options => %s::jsonb)",
                (kb, text, method, json.dumps(extra)),
            ).fetchall()
            times.append(time.perf_counter() - t0)
            seen: list[str] = []
            for path, expanded in rows:
                doc = by_title.get(path[-1]) if path else None
                if doc and doc not in seen and expanded is None:
                    seen.append(doc)
            runs[qid] = seen
        quality = metrics(runs, {q: data.qrels[q] for q in keep_q})
        out[label] = {
            **lat(times[5:]),
            "ndcg@10": round(quality["ndcg@10"], 4),
            "recall@10": round(quality["recall@10"], 4),
        }
    conn.close()
    return out
