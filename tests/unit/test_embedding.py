"""The offline model's batching and the vectors kept for jobs embedded ahead."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from kbpg_db import embedding
from kbpg_db.config import IndexingConfig


def test_local_batches_of_like_length_give_each_text_its_own_vector() -> None:
    """Texts of very different lengths, embedded together in any batch size, get the
    vectors they get alone, in their own order."""
    model = embedding.local_model()
    texts = [
        "short",
        "a somewhat longer sentence about cells and genes",
        " ".join(["protein folding in the endoplasmic reticulum"] * 12),
        "short too",
        " ".join(["vitamin"] * 40),
    ]
    alone = np.vstack([model.embed([t]) for t in texts])
    for batch_size in (1, 2, 64):
        together = model.embed(texts, batch_size=batch_size)
        assert np.abs(together - alone).max() < 1e-4


def test_local_batches_keep_to_like_lengths_the_row_limit_and_the_word_piece_budget() -> None:
    rng = np.random.default_rng(7)
    lengths = [int(x) for x in rng.integers(1, 257, 500)] + [256] * 20 + [3] * 200
    for batch_size in (1, 8, 64):
        for budget in (64, 1024, 100_000):
            batches = embedding.plan_batches(lengths, batch_size, budget)
            assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
            for b in batches:
                widths = [lengths[i] for i in b]
                assert widths == sorted(widths) and len(b) <= batch_size
                assert max(widths) <= 1.1 * min(widths)
                assert len(b) == 1 or len(b) * max(widths) <= budget
    # The default budget: 256-word-piece texts go four at a time, short ones 64.
    assert {len(b) for b in embedding.plan_batches([256] * 20, 64)} == {4}
    assert {len(b) for b in embedding.plan_batches([3] * 128, 64)} == {64}


def test_vectors_embedded_ahead_are_taken_once_and_only_whole() -> None:
    cfg = IndexingConfig()
    embedding.clear_ahead()
    assert (
        embedding.embed_ahead(cfg, ["alpha text", "beta text", "alpha text"], [2, 2, 2], None) == 3
    )
    alpha = embedding.embed(cfg, ["alpha text"]).vectors[0]
    # A document whose texts are not all kept embeds on its own.
    assert embedding.take_ahead(cfg, ["alpha text", "gamma text"]) is None
    first = embedding.take_ahead(cfg, ["alpha text", "beta text"])
    assert first is not None and first.tokens == 4 and first.calls == 0
    assert np.allclose(first.vectors[0], alpha, atol=1e-5)
    # The duplicate "alpha text" is still there once; "beta text" is gone.
    assert embedding.take_ahead(cfg, ["beta text"]) is None
    assert embedding.take_ahead(cfg, ["alpha text"]) is not None
    assert embedding.take_ahead(cfg, ["alpha text"]) is None
    # Another model's vectors are never taken for this one.
    embedding.embed_ahead(cfg, ["delta text"], [2], None)
    other = IndexingConfig(embedding_model="openai/text-embedding-3-small", api_key_name="K")
    assert embedding.take_ahead(other, ["delta text"]) is None
    embedding.clear_ahead()


def test_vector_literals_give_every_float32_back_exactly() -> None:
    """What kb.chunk_payload carries to vector_in (and a query to array_in): float32
    values round-trip bit for bit, float64 ones (a provider's JSON) come back as real[]
    rounded them, and an empty vector is an error that says so."""
    rng = np.random.default_rng(7)
    vec32 = rng.normal(size=384).astype(np.float32)
    extremes = np.array([1e-45, -3.4028235e38, 1.1754944e-38, 0.0, -0.0, 1.0], np.float32)
    for vec in (vec32, extremes):
        text = embedding.vector_literal(vec.tolist())
        assert text.startswith("[") and text.endswith("]") and " " not in text
        back = np.array(text[1:-1].split(","), dtype=np.float32)
        assert back.tobytes() == vec.tobytes()
        # The query path's real[] literal carries the same text.
        assert embedding.array_literal(vec.tolist()) == "{" + text[1:-1] + "}"
    vec64 = rng.normal(size=16).tolist()
    back = np.array(embedding.vector_literal(vec64)[1:-1].split(","), dtype=np.float32)
    assert back.tobytes() == np.asarray(vec64, dtype=np.float32).tobytes()
    try:
        embedding.vector_literal([])
    except ValueError as exc:
        assert "no dimensions" in str(exc)
    else:
        raise AssertionError("an empty vector was accepted")


class _Plpy:
    """Enough of plpy for features.step with the local model: no setting is set."""

    def prepare(self, sql: str, types: list[str]) -> str:
        return sql

    def execute(self, *args: object) -> list[dict[str, None]]:
        return [{"t": None, "v": None}]


def test_only_embedding_errors_are_reported_as_embedding_failures(monkeypatch: Any) -> None:
    from kbpg_db import features
    from kbpg_db.features import Document
    from kbpg_db.sqlstates import SqlError

    cfg = IndexingConfig()
    doc = Document("a title", "some text")

    def fails(error: Exception) -> Any:
        def build(*_args: object) -> None:
            raise error

        return build

    monkeypatch.setattr(features, "build", fails(embedding.EmbeddingError("provider said 503")))
    with pytest.raises(SqlError, match=r"^embedding failed: provider said 503"):
        features.step(_Plpy(), doc, cfg, None, None)
    # Another fault (a missing data file, a bug) is not called an embedding failure.
    monkeypatch.setattr(features, "build", fails(RuntimeError("cl100k_base is damaged")))
    with pytest.raises(RuntimeError, match=r"^cl100k_base is damaged"):
        features.step(_Plpy(), doc, cfg, None, None)


def test_a_provider_that_keeps_failing_is_an_embedding_error() -> None:
    class Unavailable(Exception):
        pass

    def call() -> None:
        raise Unavailable("try later")

    with pytest.raises(embedding.EmbeddingError, match="model-x failed: Unavailable: try later"):
        embedding.call_with_retries(call, 0, "model-x")
