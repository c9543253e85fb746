"""`kbpg demo` (what `make demo` runs): index the sample corpus, then search it."""

from __future__ import annotations

import argparse
import time

from kbpg.resources import sample_dir

KB = "harbor-demo"
QUERIES = [
    ("hybrid", "How do I get back one file as it was last week?"),
    ("hybrid", "What does the Team plan cost?"),
    ("full_text", "error E42"),
    ("vector", "can support recover my data if I forgot my passphrase"),
]


def run_demo(args: argparse.Namespace) -> int:
    from kbpg.client import Client
    from kbpg.db import resolve_dsn
    from kbpg.loaders import discover, load_file
    from kbpg.worker import Worker

    dsn = resolve_dsn(args.dsn)
    with Client(dsn) as client:
        client.drop_knowledge_base(KB, if_exists=True)
        client.create_knowledge_base(KB, description="Harbor Backup sample documents")
        print(
            f"created knowledge base {KB!r} (default: markdown_header chunks, "
            "local all-MiniLM-L6-v2, hybrid search)"
        )
        for folder, mode in (("docs", "rag"), ("policy", "policy"), ("system", "system")):
            for path, root in discover([sample_dir() / folder]):
                doc = load_file(path, root=root, usage_mode=mode, metadata={"category": folder})
                result = client.put(KB, doc)
                print(f"  {result.action:8s} {doc.title}  ({mode})")
    t0 = time.monotonic()
    stats = Worker(dsn, concurrency=2, once=True, poll_interval=0.5).run()
    print(f"indexed {stats.done} documents in {time.monotonic() - t0:.1f}s ({stats.failed} failed)")
    with Client(dsn) as client:
        for d in client.document_status(KB):
            print(f"  {d['status']:6s} {d['chunk_count']:3d} chunks  {d['title']}")
        for method, query in QUERIES:
            print(f"\n=== kb.search({KB!r}, {query!r}, method => {method!r}, top_k => 3)")
            for r in client.search(KB, query, method=method, top_k=3):
                snippet = " ".join(r.content.split())
                print(f"{r.rank}. [{r.score:.3f}] {r.source}")
                print(f"   {snippet[:160]}{'…' if len(snippet) > 160 else ''}")
        for query in (
            "How do I restore a single file from last week?",
            "What will the weather be in Paris tomorrow?",
        ):
            print(f"\n=== kb.build_context({KB!r}, {query!r}, relevance_threshold => 0.4)")
            ctx = client.build_context(KB, query, token_budget=400, relevance_threshold=0.4)
            print(ctx["context"])
            fallback = f", fallback: {ctx['fallback']!r}" if ctx["fallback"] else ""
            print(f"--- has_relevant={ctx['has_relevant']}, {ctx['tokens_used']} tokens{fallback}")
    print(
        '\nTry it yourself:  psql "$(.venv/bin/kbpg dsn)" -c '
        f"\"SELECT rank, title, score FROM kb.search('{KB}', 'restore a whole machine')\""
    )
    return 0
