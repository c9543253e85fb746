"""The bridge between SQL and the modules here: each function takes ``plpy`` first.

The ``LANGUAGE plpython3u`` bodies in ``sql/`` call exactly one function of this
module; arguments arrive as PL/Python gives them (jsonb as text), and errors leave as
``plpy.error`` with a specific SQLSTATE.
"""

from __future__ import annotations

import json
import os
from typing import Any

INVALID_PARAMETER = "22023"  # invalid_parameter_value
DATA_EXCEPTION = "22000"
EXTERNAL_FAILURE = "KB001"  # ours: a provider or model failed (class 58 reads as a lost connection)


def _json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        return json.loads(value)
    return value


def _config_or_error(plpy: Any, kind: str, value: Any) -> dict[str, Any]:
    from kbpg_db import config

    try:
        return config.validate(kind, _json(value))
    except ValueError as exc:
        plpy.error(
            f"invalid {kind}",
            detail=str(exc),
            hint="see the README for the fields and their ranges",
            sqlstate=INVALID_PARAMETER,
        )
        raise  # plpy.error raises; this keeps type checkers content


def validate_config(plpy: Any, kind: str, value: Any) -> str:
    return json.dumps(_config_or_error(plpy, kind, value))


def api_key(plpy: Any, name: str | None) -> str | None:
    """A provider key: session setting ``kb.<name>`` first, then the server's environment."""
    if not name:
        return None
    row = plpy.execute(
        plpy.prepare("SELECT current_setting($1, true) AS v", ["text"]), ["kb." + name.lower()]
    )
    value = row[0]["v"] if row else None
    return value or os.environ.get(name)


def _default_key_name(model: str) -> str | None:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return {
        "openai": "OPENAI_API_KEY",
        "cohere": "COHERE_API_KEY",
        "voyage": "VOYAGE_API_KEY",
        "gemini": "GEMINI_API_KEY",
        "mistral": "MISTRAL_API_KEY",
        "jina_ai": "JINA_AI_API_KEY",
    }.get(provider)


def preview_chunks(
    plpy: Any, content: str, indexing_config: Any, page_starts: list[int] | None
) -> list[dict[str, Any]]:
    from kbpg_db import chunking

    cfg = _config_or_error(plpy, "indexing_config", indexing_config)
    try:
        chunks = chunking.chunk_text(
            content, cfg["chunker"], cfg["chunk_size"], cfg["chunk_overlap"], cfg["title_line"]
        )
    except ValueError as exc:
        plpy.error(str(exc), sqlstate=INVALID_PARAMETER)
    return [
        {
            "ordinal": c.ordinal,
            "content": c.content,
            "embed_text": c.embed_text,
            "token_count": c.token_count,
            "heading_path": c.heading_path,
            "page": chunking.page_of(page_starts, c.char_start),
            "char_start": c.char_start,
            "char_end": c.char_end,
            "embedding": None,
        }
        for c in chunks
    ]


def chunk_and_embed(
    plpy: Any, content: str, indexing_config: Any, page_starts: list[int] | None
) -> dict[str, Any]:
    """Chunk a document and embed its chunks: the compute half of indexing one document."""
    from kbpg_db import config, embedding, tokens

    rows = preview_chunks(plpy, content, indexing_config, page_starts)
    cfg = config.IndexingConfig.model_validate(_json(indexing_config))
    key = api_key(plpy, cfg.api_key_name or _default_key_name(cfg.embedding_model))
    try:
        texts = [r["embed_text"] for r in rows]
        result = embedding.embed(cfg, texts, key, [tokens.count(t) for t in texts])
    except ValueError as exc:
        plpy.error(str(exc), sqlstate=DATA_EXCEPTION)
    except Exception as exc:
        plpy.error(f"embedding failed: {exc}", sqlstate=EXTERNAL_FAILURE)
    for row, vec in zip(rows, result.vectors, strict=True):
        row["embedding"] = vec
    return {
        "chunks": rows,
        "tokens": result.tokens,
        "cost_usd": result.cost_usd,
        "calls": result.calls,
    }


def prepare_query(
    plpy: Any,
    indexing_config: Any,
    retrieval_config: Any,
    overrides: Any,
    query: str,
) -> dict[str, Any]:
    """Merge and validate per-call options; embed the query when the method needs it.

    A failing embedding provider does not fail a hybrid query: the vector channel is
    dropped and ``note`` says why.
    """
    from kbpg_db import config, embedding

    merged = dict(_json(retrieval_config) or {})
    merged.update(_json(overrides) or {})
    cfg = _config_or_error(plpy, "retrieval_config", merged)
    out: dict[str, Any] = {"config": json.dumps(cfg), "embedding": None, "note": None}
    if cfg["method"] == "full_text":
        return out
    icfg = config.IndexingConfig.model_validate(_json(indexing_config))
    key = api_key(plpy, icfg.api_key_name or _default_key_name(icfg.embedding_model))
    try:
        out["embedding"] = embedding.embed(icfg, [query], key).vectors[0]
    except Exception as exc:
        if cfg["method"] == "vector":
            plpy.error(f"could not embed the query: {exc}", sqlstate=EXTERNAL_FAILURE)
        out["note"] = f"vector channel unavailable ({exc}); results from full_text only"
        plpy.warning(out["note"])
    return out


def rerank(plpy: Any, retrieval_config: Any, query: str, documents: list[str]) -> list[float]:
    from kbpg_db import reranking

    cfg = _json(retrieval_config)
    model = cfg.get("rerank_model")
    key = api_key(plpy, cfg.get("rerank_api_key_name") or _default_key_name(model or ""))
    try:
        return reranking.rerank(model, query, list(documents), cfg.get("rerank_api_base"), key)
    except ValueError as exc:
        plpy.error(str(exc), sqlstate=INVALID_PARAMETER)
    except Exception as exc:
        plpy.error(f"rerank failed: {exc}", sqlstate=EXTERNAL_FAILURE)
    raise AssertionError("unreachable")


def count_tokens(text: str) -> int:
    from kbpg_db import tokens

    return tokens.count(text)


def assemble_context(plpy: Any, rows: Any, budget: int, max_per_doc: int) -> dict[str, Any]:
    from kbpg_db import context

    return context.assemble(_json(rows), budget, max_per_doc).as_row()
