"""The in-memory BM25 scorer's parts without a database: scoring and ranking against a
plain Python loop (both accumulators: chunk ids close together and far apart), and the
posting cache's versions and budget."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from kbpg_db import bm25


def _postings(rng: random.Random, n_chunks: int, spread: int, version: str = "v") -> bm25.Postings:
    ids = sorted(rng.sample(range(0, n_chunks * spread, spread), rng.randint(1, n_chunks)))
    return bm25.postings(
        version,
        np.array(ids, dtype=np.int64),
        np.array([rng.randint(1, 5) for _ in ids], dtype=np.int64),
        np.array([rng.randint(3, 80 if spread < 10 else 90_000) for _ in ids], dtype=np.int64),
    )


@pytest.mark.parametrize("spread", [1, 3, 10_000])  # the dense path, and np.unique's
@pytest.mark.parametrize("seed", range(6))
def test_scores_and_order_equal_a_plain_loop(seed: int, spread: int) -> None:
    rng = random.Random(seed)
    terms = [_postings(rng, 300, spread) for _ in range(rng.randint(1, 6))]
    idfs = [rng.uniform(0.1, 5) for _ in terms]
    k1, b, avgdl = rng.choice([(1.2, 0.75, 30.0), (0.5, 0.0, 12.5), (2.0, 1.0, 44.0)])
    want: dict[int, float] = {}
    for p, idf in zip(terms, idfs, strict=True):
        for cid, tf, dl in zip(p.ids.tolist(), p.tf.tolist(), p.dl.tolist(), strict=True):
            s = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
            want[cid] = want.get(cid, 0.0) + s
    ids, scores = bm25._accumulate(terms, idfs, k1, b, avgdl)
    assert dict(zip(ids.tolist(), scores.tolist(), strict=True)) == pytest.approx(want)
    for n in (1, 7, len(want), len(want) + 5):
        got = bm25._ranked(ids, scores, n)
        expected = sorted(want, key=lambda c: (-want[c], c))[:n]
        assert [int(ids[i]) for i in got] == expected
        # Accumulated for a top n: fewer chunks, the same top n with the same scores.
        few_ids, few_scores = bm25._accumulate(terms, idfs, k1, b, avgdl, n)
        best = bm25._ranked(few_ids, few_scores, n)
        assert few_ids[best].tolist() == expected
        assert few_scores[best].tolist() == scores[got].tolist()


def test_a_top_k_floor_keeps_every_tie_at_the_cut() -> None:
    """Chunks 0-99 hold one term, the even ones below 40 a second (20 chunks, one score:
    the floor of a top 10 is a tie) and 10, 20, 30 a third: the top 10 are 10, 20, 30,
    then the tie's lowest ids, as ranking every chunk gives, from 20 chunks instead of 100."""

    def term(version: str, ids: list[int]) -> bm25.Postings:
        n = len(ids)
        return bm25.postings(
            version,
            np.array(ids, dtype=np.int64),
            np.ones(n, dtype=np.int64),
            np.full(n, 10, dtype=np.int64),
        )

    terms = [term("a", list(range(100))), term("b", list(range(0, 40, 2))), term("c", [30, 20, 10])]
    args = (terms, [1.0, 2.0, 3.0], 1.2, 0.75, 10.0)
    ids, scores = bm25._accumulate(*args)
    few_ids, few_scores = bm25._accumulate(*args, 10)
    assert len(ids) == 100 and len(few_ids) == 20
    got = few_ids[bm25._ranked(few_ids, few_scores, 10)].tolist()
    assert got == ids[bm25._ranked(ids, scores, 10)].tolist() == [10, 20, 30, 0, 2, 4, 6, 8, 12, 14]


def test_pruned_top_k_equals_scoring_every_posting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rare terms beside common ones (what pruning is for), and other mixes: the same
    chunks, order and scores as _accumulate over every posting."""
    monkeypatch.setattr(bm25, "PRUNE_MIN_POSTINGS", 0)  # these terms are small
    pruned = sum(_pruned_case(seed) for seed in range(40))
    assert pruned > 20  # the comparison did test pruning


def _pruned_case(seed: int) -> int:
    rng = random.Random(seed)
    n = rng.choice([50, 400, 3000])
    terms = [_postings(rng, n, rng.choice([1, 1, 7])) for _ in range(rng.randint(1, 7))]
    for p in terms[: rng.randint(0, 3)]:  # a few rare terms
        keep = sorted(rng.sample(range(len(p.offsets)), max(1, len(p.offsets) // 40)))
        terms[terms.index(p)] = bm25.postings(
            "r", p.ids[keep], p.tf[keep].astype(np.int64), p.dl[keep].astype(np.int64)
        )
    idfs = [rng.uniform(0.05, 6) for _ in terms]
    k1, b, avgdl = rng.choice([(1.2, 0.75, 30.0), (0.5, 0.0, 12.5), (2.0, 1.0, 44.0)])
    ids, scores = bm25._accumulate(terms, idfs, k1, b, avgdl)
    true = dict(zip(ids.tolist(), scores.tolist(), strict=True))
    pruned = 0
    for k in (1, 3, 10, 100, len(ids) + 1):
        want = bm25._ranked(ids, scores, k)
        got_ids, got_scores, read = bm25._top(terms, idfs, k1, b, avgdl, k)
        assert 1 <= read <= len(terms)
        pruned += read < len(terms)
        # The k best scores, each chunk with its own true score (ties may swap chunks).
        assert got_scores.tolist() == pytest.approx(scores[want].tolist(), rel=1e-12)
        assert [true[i] for i in got_ids.tolist()] == pytest.approx(got_scores.tolist(), rel=1e-12)
        assert len(set(got_ids.tolist())) == len(got_ids)
    return pruned


def test_pruning_reads_only_the_rare_terms_when_they_decide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bm25, "PRUNE_MIN_POSTINGS", 0)
    rng = random.Random(3)
    common = [_postings(rng, 3000, 1) for _ in range(4)]
    rare = bm25.postings(
        "r",
        np.array([10, 20, 30], dtype=np.int64),
        np.full(3, 3, dtype=np.int64),
        np.full(3, 10, dtype=np.int64),
    )
    got_ids, _, read = bm25._top([*common, rare], [0.2, 0.2, 0.3, 0.3, 7.0], 1.2, 0.75, 30.0, 3)
    assert read == 1 and sorted(got_ids.tolist()) == [10, 20, 30]


def test_ties_at_the_cut_go_to_the_lower_chunk_id() -> None:
    ids = np.array([9, 4, 7, 2, 5], dtype=np.int64)
    scores = np.array([1.0, 2.0, 1.0, 1.0, 3.0])
    assert [int(ids[i]) for i in bm25._ranked(ids, scores, 3)] == [5, 4, 2]


def _sized(n: int, version: str) -> bm25.Postings:
    return bm25.postings(
        version,
        np.arange(n, dtype=np.int64),
        np.ones(n, dtype=np.int64),
        np.full(n, 10, dtype=np.int64),
    )


def test_cache_keeps_a_version_and_its_budget() -> None:
    cache = bm25.PostingCache()
    a, b = _sized(50, "1/(0,1)"), _sized(50, "1/(0,2)")
    budget = a.nbytes + b.nbytes
    cache.put((1, 1, "a"), a, budget)
    cache.put((1, 1, "b"), b, budget)
    assert cache.get((1, 1, "a"), "1/(0,1)") is a
    assert cache.get((1, 1, "a"), "2/(0,7)") is None  # the term's row changed
    assert (cache.hits, cache.misses) == (1, 1)
    c = _sized(50, "3/(0,3)")
    cache.put((1, 1, "c"), c, budget)  # over budget: the least recently used goes first
    assert (1, 1, "b") not in cache.entries and (1, 1, "a") in cache.entries
    assert cache.nbytes <= budget
    cache.put((1, 1, "huge"), c, c.nbytes - 1)  # bigger than the budget: not kept
    assert (1, 1, "huge") not in cache.entries
    cache.trim(0)
    assert cache.entries == {} and cache.nbytes == 0


def test_packed_rows_unpack_as_sql_writes_them() -> None:
    packed = b"".join(
        cid.to_bytes(8, "big") + tf.to_bytes(4, "big") + dl.to_bytes(4, "big")
        for cid, tf, dl in [(2**40 + 3, 2, 17), (5, 1, 9)]
    )
    p = bm25._unpack("v", packed)  # kept in chunk id order
    assert p.ids.tolist() == [5, 2**40 + 3] and p.tf.tolist() == [1, 2] and p.dl.tolist() == [9, 17]
    assert p.base == 5 and p.offsets.dtype == np.int64  # 2**40 apart: no narrower type
    assert p.tf.dtype == p.dl.dtype == np.uint16
    assert p.nbytes == 2 * 8 + 2 * 2 + 2 * 2
    assert math.isclose(
        float(bm25._accumulate([p], [1.0], 1.2, 0.75, 10.0)[1].sum()),
        sum(tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / 10)) for tf, dl in [(2, 17), (1, 9)]),
    )
