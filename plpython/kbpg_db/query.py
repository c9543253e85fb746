"""A query's way into search: its options merged and validated, its vector, and Tree
Search's rows. kb.search's plan (sql/400-search-plan.sql) calls these through kbpg_db.sqlapi."""

from __future__ import annotations

import json
from typing import Any

from kbpg_db import config, keys
from kbpg_db.sqlstates import EXTERNAL_FAILURE, INVALID_PARAMETER, SqlError


def prepare(
    plpy: Any,
    indexing_config: Any,
    retrieval_config: Any,
    overrides: Any,
    query: str,
    expansion_ready: bool = True,
) -> dict[str, Any]:
    """Merge and validate per-call options; embed the query when the method needs it.

    full_text embeds the query for its term expansion only, and not where
    ``expansion_ready`` is false (the generation's words have no vectors yet: the search
    says so in its note). A failing embedding provider does not fail a hybrid query: the
    vector channel is dropped and ``note`` says why. Nor a full_text one: it searches the
    query's own words then.
    """
    from kbpg_db import embedding

    icfg = config.indexing_cached(indexing_config)
    cfg = config.retrieval_cached(retrieval_config, overrides, icfg.strategy)
    if cfg.get("rerank"):
        from kbpg_db import reranking

        cfg = reranking.with_own_chat_model(cfg, icfg)
    if cfg.get("term_expansion") is None:
        cfg["term_expansion"] = config.term_expansion_default(icfg.embedding_model)
    out: dict[str, Any] = {
        "config": json.dumps(cfg),
        "embedding": None,
        "note": None,
        "usage": None,
    }
    if cfg["method"] == "tree_search" or (
        cfg["method"] == "full_text" and not (cfg["term_expansion"] and expansion_ready)
    ):
        return out
    key = keys.for_model(plpy, icfg.api_key_name, icfg.embedding_model)
    try:
        embedded = embedding.embed(icfg, [query], key, query=True)
        out["embedding"] = embedding.array_literal(embedded.vectors[0])
        out["usage"] = json.dumps(
            {
                "embedding": {
                    "model": icfg.embedding_model,
                    "tokens": embedded.tokens,
                    "cost_usd": embedded.cost_usd,
                }
            }
        )
    except Exception as exc:
        if cfg["method"] == "vector":
            raise SqlError(f"could not embed the query: {exc}", EXTERNAL_FAILURE) from None
        if cfg["method"] == "full_text":
            out["note"] = f"term expansion unavailable ({exc}); the query's own words only"
        else:
            out["note"] = f"vector channel unavailable ({exc}); results from full_text only"
        plpy.warning(out["note"])
    return out


def tree_search_rows(
    plpy: Any, kb_id: int, index_id: int, query: str, retrieval_config: Any, indexing_config: Any
) -> list[dict[str, Any]]:
    """Tree Search rows (chunk, rank, node, reasoning); the first carries the note and the
    phases. Reads the call cache, writes nothing."""
    from kbpg_db import llm
    from kbpg_db.features.page_index import tree_search

    cfg = config.from_json(retrieval_config)
    settings = config.indexing_cached(indexing_config).llm()
    if not settings.model:
        raise SqlError(
            "tree_search needs an LLM, and this knowledge base has none",
            INVALID_PARAMETER,
            "its indexing_config.extra.model is not set",
            'reindex with indexing_config => \'{"strategy": "page_index", '
            '"extra": {"model": "..."}}\'',
        )
    layer = llm.layer(plpy, settings, writable=False, capped=False)
    try:
        out = tree_search.search(
            plpy,
            layer,
            tree_search.Generation(int(kb_id), int(index_id)),
            query,
            int(cfg["top_k"]),
            int(cfg["max_documents"]),
            int(cfg["toc_token_budget"]),
            (config.bm25_k1(cfg), float(cfg["bm25_b"])),
        )
    except llm.LlmError as exc:
        raise SqlError(f"tree_search failed: {exc}", EXTERNAL_FAILURE) from None
    phases = json.dumps(out.phases)
    usage = json.dumps(layer.usage.as_json())
    rows = [
        {
            "chunk_id": node.chunk_id,
            "rank": rank,
            "node_id": node.node_id,
            "reasoning": why,
            "note": out.note if rank == 1 else None,
            "phases": phases if rank == 1 else None,
            "usage": usage if rank == 1 else None,
        }
        for rank, (node, why) in enumerate(out.hits, start=1)
    ]
    if not rows:
        rows = [
            {
                "chunk_id": None,
                "rank": None,
                "node_id": None,
                "reasoning": None,
                "note": out.note,
                "phases": phases,
                "usage": usage,
            }
        ]
    return rows
