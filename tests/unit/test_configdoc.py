"""docs/configuration.md's settings reference is the one the models generate."""

from __future__ import annotations

from pathlib import Path

from kbpg_db import config, configdoc

DOC = Path(__file__).parents[2] / "docs" / "configuration.md"


def test_the_reference_in_the_docs_is_current() -> None:
    text = DOC.read_text()
    start = text.index(configdoc.BEGIN)
    end = text.index(configdoc.END) + len(configdoc.END)
    assert text[start:end] == configdoc.reference(), "run `make docs`"


def test_every_setting_is_described_with_its_range_and_default() -> None:
    reference = configdoc.reference()
    models = [config.IndexingConfig, config.RetrievalConfig, config.LlmSettings]
    models += [f.settings for f in config.FEATURES]
    for model in models:
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
            assert f"| `{name}` |" in reference, f"{model.__name__}.{name} is not in the docs"
    assert "| `chunk_size` | integer (16 to 32000) | 200 |" in reference
    assert "| `rrf_k` | number (above 0.0, at most 10000.0) | 60.0 |" in reference
    assert "| `strategy` | `chunk_embed` \\| `page_index` \\| `graph_index` \\| `doc2json` |" in (
        reference
    )
