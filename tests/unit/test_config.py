"""Config validation names the field at fault."""

from __future__ import annotations

import pytest
from kbpg_db.config import IndexingConfig, validate


def test_defaults() -> None:
    cfg = validate("indexing_config", {})
    assert cfg["chunker"] == "markdown_header" and cfg["chunk_size"] == 200
    assert IndexingConfig().dimensions == 384
    r = validate("retrieval_config", None)
    assert (r["method"], r["top_k"], r["vector_weight"], r["rrf_k"]) == ("hybrid", 10, 0.5, 60.0)


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        ("indexing_config", {"chunk_size": 0}, "indexing_config.chunk_size"),
        ("indexing_config", {"chunker": "semantic"}, "indexing_config.chunker"),
        ("indexing_config", {"colour": 1}, "indexing_config.colour"),
        ("indexing_config", {"chunk_size": 50, "chunk_overlap": 50}, "chunk_overlap (50)"),
        ("indexing_config", {"embedding_model": "local/other"}, "unknown local embedding model"),
        ("indexing_config", {"embedding_model": "x/y"}, "embedding_dimensions is required"),
        ("indexing_config", {"chunk_size": 5000}, "exceeds the 200-token input"),
        ("retrieval_config", {"top_k": 0}, "retrieval_config.top_k"),
        ("retrieval_config", {"method": "magic"}, "retrieval_config.method"),
        ("retrieval_config", {"rerank": True}, "rerank_model is not set"),
        ("retrieval_config", [], "must be a JSON object"),
    ],
)
def test_errors(kind: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(kind, value)  # type: ignore[arg-type]


def test_large_models_and_truncation_opt_in() -> None:
    cfg = validate("indexing_config", {"embedding_model": "openai/text-embedding-3-large"})
    assert IndexingConfig.model_validate(cfg).dimensions == 3072
    ok = validate("indexing_config", {"chunk_size": 512, "truncate_for_embedding": True})
    assert ok["chunk_size"] == 512
