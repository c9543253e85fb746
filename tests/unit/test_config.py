"""Config validation: each error names the field and the value given, in plain words."""

from __future__ import annotations

import re

import pytest
from kbpg_db import config
from kbpg_db.config import (
    STRATEGIES,
    ConfigError,
    IndexingConfig,
    merge_defaults,
    validate,
    validate_defaults,
)


def test_defaults() -> None:
    cfg = validate("indexing_config", {})
    assert cfg["chunker"] == "markdown_header" and cfg["chunk_size"] == 200
    assert cfg["strategy"] == "chunk_embed" and cfg["extra"] == {}
    assert cfg["embedding_dimensions"] == 384  # recorded: SQL reads the size from the config
    assert IndexingConfig().dimensions == 384
    r = validate("retrieval_config", None)
    assert (r["method"], r["top_k"], r["vector_weight"], r["rrf_k"]) == ("hybrid", 10, 0.5, 60.0)
    # term_expansion unset: by the embedding model (the reference table says the number).
    assert r["term_expansion"] is None
    assert config.term_expansion_default(config.LOCAL_MODEL) == config.TERM_EXPANSION > 0
    assert config.term_expansion_default(config.MULTILINGUAL_MODEL) == config.TERM_EXPANSION
    assert config.term_expansion_default("openai/text-embedding-3-small") == 0
    described = config.RetrievalConfig.model_fields["term_expansion"].description or ""
    assert f"unset: {config.TERM_EXPANSION} with a local embedding model" in described


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        ("indexing_config", {"chunk_size": 0}, "chunk_size must be between 16 and 32000 (got 0)"),
        (
            "indexing_config",
            {"chunker": "by-chapter"},
            'unknown chunker "by-chapter" (expected markdown_header, recursive, fixed_size, cjk, '
            "paragraph, sentence or semantic)",
        ),
        ("indexing_config", {"colour": 1}, 'unknown field "colour"'),
        (
            "indexing_config",
            {"chunk_size": 50, "chunk_overlap": 50},
            "chunk_overlap (50) must be smaller than chunk_size (50)",
        ),
        ("indexing_config", {"embedding_model": "local/other"}, "unknown local embedding model"),
        ("indexing_config", {"embedding_model": "x/y"}, "embedding_dimensions is required"),
        (
            "indexing_config",
            {"chunk_size": 5000},
            "chunk_size 5000 exceeds the 200-token input of local/all-MiniLM-L6-v2",
        ),
        ("indexing_config", {"batch_size": "many"}, 'batch_size must be an integer (got "many")'),
        ("retrieval_config", {"top_k": 0}, "top_k must be between 1 and 1000 (got 0)"),
        ("retrieval_config", {"top_k": 2000}, "top_k must be between 1 and 1000 (got 2000)"),
        (
            "retrieval_config",
            {"method": "tree_serch"},
            'unknown method "tree_serch" (expected hybrid, vector, full_text or tree_search)',
        ),
        ("retrieval_config", {"fusion": "max"}, 'unknown fusion "max" (expected zscore or rrf)'),
        ("retrieval_config", {"rerank": True}, "rerank is on but rerank_model is not set"),
        ("retrieval_config", [], "retrieval_config must be a JSON object, not list"),
    ],
)
def test_errors(kind: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(kind, value)  # type: ignore[arg-type]
    assert info.value.problems[0] == message or info.value.problems[0].startswith(message)
    assert "Input should" not in str(info.value)


def test_every_field_at_fault_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        validate("retrieval_config", {"top_k": 0, "rrf_k": -1, "bogus": 1})
    assert len(info.value.problems) == 3
    assert 'unknown field "bogus"' in info.value.problems


def test_strategies_and_their_methods() -> None:
    assert STRATEGIES["chunk_embed"].methods == ("hybrid", "vector", "full_text")
    assert STRATEGIES["page_index"].methods == ("tree_search",)
    cfg = validate("indexing_config", {"strategy": "page_index", "extra": {"model": "openai/m"}})
    assert cfg["extra"]["llm_concurrency"] == 7 and cfg["extra"]["if_add_node_summary"] == "yes"
    # The method defaults to the strategy's own; one it cannot serve is refused by name.
    assert validate("retrieval_config", {}, "page_index")["method"] == "tree_search"
    with pytest.raises(ConfigError, match="not available for a page_index knowledge base"):
        validate("retrieval_config", {"method": "hybrid"}, "page_index")
    with pytest.raises(ConfigError, match="not available for a chunk_embed knowledge base"):
        validate("retrieval_config", {"method": "tree_search"}, "chunk_embed")
    assert validate("retrieval_config", {}, "graph_index")["method"] == "hybrid"
    assert validate("retrieval_config", {}, "doc2json")["method"] == "vector"
    graph = validate("indexing_config", {"strategy": "graph_index"})["extra"]
    assert graph["enrichment"] == "auto" and graph["max_token_num_each_node"] == 20000
    with pytest.raises(ConfigError, match=r"extra\.json_schema is required"):
        validate("indexing_config", {"strategy": "doc2json"})
    # A project default for one Doc2JSON setting need not carry a schema.
    assert validate_defaults("indexing_config", {"extra": {"mode": "image"}})
    with pytest.raises(ConfigError, match=r'unknown field "extra\.model"'):
        validate("indexing_config", {"extra": {"model": "openai/m"}})  # chunk_embed has none
    with pytest.raises(ConfigError, match=r"extra\.llm_concurrency must be between 1 and 64"):
        validate("indexing_config", {"strategy": "page_index", "extra": {"llm_concurrency": 0}})


def test_project_defaults_merge() -> None:
    defaults = {"chunk_size": 150, "extra": {"model": "openai/m", "llm_concurrency": 3}}
    validate_defaults("indexing_config", defaults)
    # ChunkEmbed KBs ignore the PageIndex model; PageIndex KBs take it, key by key.
    plain = validate("indexing_config", merge_defaults(defaults, {}))
    assert plain["chunk_size"] == 150 and plain["extra"] == {}
    tree = validate(
        "indexing_config",
        merge_defaults(defaults, {"strategy": "page_index", "extra": {"llm_concurrency": 2}}),
    )
    assert tree["extra"]["model"] == "openai/m" and tree["extra"]["llm_concurrency"] == 2
    assert tree["chunk_size"] == 150
    with pytest.raises(ConfigError, match=r'unknown field "extra\.nope"'):
        validate_defaults("indexing_config", {"extra": {"nope": 1}})
    with pytest.raises(ConfigError, match="chunk_size must be between"):
        validate_defaults("indexing_config", {"chunk_size": 1})


def test_large_models_and_truncation_opt_in() -> None:
    cfg = validate("indexing_config", {"embedding_model": "openai/text-embedding-3-large"})
    assert IndexingConfig.model_validate(cfg).dimensions == 3072
    ok = validate("indexing_config", {"chunk_size": 512, "truncate_for_embedding": True})
    assert ok["chunk_size"] == 512


def test_cjk_chunker_settings() -> None:
    cfg = validate(
        "indexing_config",
        {"chunker": "cjk", "chunk_unit": "characters", "chunk_size": 180, "separators": ["\\n"]},
    )
    assert cfg["cjk_bigrams"] is True and cfg["separators"] == ["\\n"]
    for bad, message in [
        ({"chunk_unit": "characters"}, 'chunk_unit "characters" is for the cjk chunker'),
        (
            {"chunker": "cjk", "chunk_unit": "characters", "chunk_size": 50},
            "chunk_size must be at least 100 characters (got 50)",
        ),
        ({"separators": ["\\n"]}, "separators are for the cjk chunker"),
        ({"chunker": "cjk", "separators": [""]}, "each separator must be 1 to 20 characters"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            validate("indexing_config", bad)


def test_document_chunking_keeps_to_chunk_settings() -> None:
    from kbpg_db.config import IndexingConfig, document_chunking

    kb = IndexingConfig(chunker="recursive", chunk_size=100, chunk_overlap=0).model_dump()
    assert document_chunking(kb, {"chunker": "cjk", "separators": ["\\n"]}) == {
        "chunker": "cjk",
        "separators": ["\\n"],
    }
    for bad, words in [
        ({"embedding_dimensions": 8}, "embedding_dimensions is the knowledge base's"),
        ({"chunk_size": 5}, "chunking: chunk_size must be between 16 and 32000"),
        ([], "chunking must be a JSON object"),
    ]:
        with pytest.raises(ValueError, match=words):
            document_chunking(kb, bad)
    with pytest.raises(ValueError, match="for chunk_embed knowledge bases"):
        document_chunking({**kb, "strategy": "page_index"}, {"chunk_size": 50})


def test_retrieval_fields_a_kb_never_reads() -> None:
    from kbpg_db.config import unused_retrieval_fields

    plain = unused_retrieval_fields("chunk_embed", {})
    assert {"max_documents", "reference_expansion", "graph_weight"} <= plain
    assert "vector_weight" not in plain and "top_k" not in plain
    with_graph = unused_retrieval_fields("chunk_embed", {"knowledge_graph": {"enabled": True}})
    assert "graph_weight" not in with_graph and "graph_hops" not in with_graph
    tree = unused_retrieval_fields("page_index", {})
    assert "max_documents" not in tree and {"vector_weight", "fusion"} <= tree
    assert "reference_expansion" not in unused_retrieval_fields("graph_index", {})


def test_a_renamed_setting_names_its_new_name() -> None:
    with pytest.raises(ConfigError, match='"graph_expansion" is now called "reference_expansion"'):
        validate("retrieval_config", {"graph_expansion": False})
