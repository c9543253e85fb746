"""quality: SciFact (BEIR) nDCG@10 for every method, against a ts_rank_cd baseline."""

from __future__ import annotations

from typing import Any

from bench.common import say, scifact_dir, ts_rank_cd_run


def scifact_set(quick: bool) -> tuple[Any, str]:
    """SciFact's test split and the KB it is indexed in; quick: 50 queries over their
    judged documents plus 400 others."""
    from kbpg.evaluate import load_beir

    data = load_beir(scifact_dir(), "test")
    if not quick:
        return data, "beir-scifact"
    keep_q = dict(list(data.queries.items())[:50])
    judged = {d for q in keep_q for d in data.qrels[q]}
    extra = [d for d in data.corpus if d not in judged][:400]
    data.corpus = {d: data.corpus[d] for d in [*judged, *extra] if d in data.corpus}
    data.queries = keep_q
    data.qrels = {q: data.qrels[q] for q in keep_q}
    return data, "bench-scifact-quick"


def bench_quality(dsn: str, quick: bool) -> dict[str, Any]:
    from kbpg.client import Client
    from kbpg.evaluate import EVAL_CONFIG, ensure_loaded, evaluate, metrics

    data, kb = scifact_set(quick)
    out: dict[str, Any] = {
        "workload": f"BEIR SciFact test, {len(data.queries)} queries, "
        f"{len(data.corpus)} documents (title + text), default config "
        "(markdown_header 200/20, all-MiniLM-L6-v2 int8) plus title_line"
    }
    with Client(dsn) as client:
        seconds = ensure_loaded(client, dsn, kb, data, concurrency=2, indexing_config=EVAL_CONFIG)
        out["index_seconds"] = round(seconds, 1)
        # The vocabulary's vectors for full_text's term expansion (kept while the KB is).
        client.conn.execute("SELECT * FROM kb.refresh_term_vectors(%s)", (kb,))
        # Fusion named explicitly: a KB made before the zscore default is pinned to rrf.
        for label, method, options in (
            ("full_text", "full_text", {}),
            ("full_text_term_expansion_0", "full_text", {"term_expansion": 0}),
            ("vector", "vector", {}),
            ("hybrid", "hybrid", {"fusion": "zscore"}),
            ("hybrid_no_plain_shift", "hybrid", {"fusion": "zscore", "plain_query_shift": 0}),
            ("hybrid_rrf", "hybrid", {"fusion": "rrf"}),
        ):
            say(f"quality: {label}")
            r = evaluate(client, kb, data, method, 100, options=options, show_progress=False)
            out[label] = {k: round(v, 4) for k, v in r.items() if isinstance(v, float)}
        say("quality: ts_rank_cd baseline")
        runs = {
            q: ts_rank_cd_run(client.conn, kb, text, 300)[:100] for q, text in data.queries.items()
        }
        out["ts_rank_cd"] = {k: round(v, 4) for k, v in metrics(runs, data.qrels).items()}
    out["targets"] = {"full_text ndcg@10": 0.68, "hybrid ndcg@10": 0.71}
    return out
