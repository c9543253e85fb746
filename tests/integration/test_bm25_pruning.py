"""Pruned BM25 (MaxScore in kb.bm25_search) returns exactly what scoring every posting
returns (kb._bm25_exhaustive): the same chunks in the same order with the same scores, on
random corpora and random queries, for any top_k, k1, b and filter, and after documents
are deleted (the bounds need no upkeep)."""

from __future__ import annotations

import random
from typing import Any

import psycopg
import pytest

from kbpg.bench import copy_chunks


def _corpus(conn: psycopg.Connection, name: str, texts: list[str]) -> int:
    """A KB whose chunks are ``texts``, written directly (BM25 needs no vectors)."""
    conn.execute("SELECT kb.create_knowledge_base(%s)", (name,))
    ix, kb_id = conn.execute(
        "SELECT active_index_id, id FROM kb.knowledge_base WHERE name = %s", (name,)
    ).fetchone()
    copy_chunks(conn, kb_id, ix, texts)
    return int(ix)


def _zipf_words(rng: random.Random, vocab: list[str], n: int, s: float) -> list[str]:
    weights = [1 / (i + 1) ** s for i in range(len(vocab))]
    return rng.choices(vocab, weights, k=n)


def _same(pruned: list[Any], exhaustive: list[Any]) -> None:
    assert len(pruned) == len(exhaustive)
    for (pid, ps), (eid, es) in zip(pruned, exhaustive, strict=True):
        assert ps == pytest.approx(es, rel=1e-9, abs=1e-12)
        if pid != eid:  # only a tie (equal scores up to rounding) may order differently
            assert ps == pytest.approx(es, rel=1e-9)
    assert {i for i, _ in pruned} == {i for i, _ in exhaustive} or all(
        abs(a[1] - b[1]) < 1e-9 for a, b in zip(pruned, exhaustive, strict=True)
    )


@pytest.mark.parametrize(
    ("seed", "vocab_size", "skew", "n_docs"),
    [(1, 300, 1.0, 1500), (2, 2000, 1.4, 300), (3, 2000, 1.0, 1500), (4, 60, 0.6, 800)],
)
def test_pruned_equals_exhaustive(
    conn: psycopg.Connection, seed: int, vocab_size: int, skew: float, n_docs: int
) -> None:
    rng = random.Random(seed)
    vocab = [f"w{i}x{rng.randint(0, 9)}" for i in range(vocab_size)]
    texts = [" ".join(_zipf_words(rng, vocab, rng.randint(1, 60), skew)) for _ in range(n_docs)]
    ix = _corpus(conn, f"prune{seed}", texts)
    checked = pruned_terms = 0
    for i in range(60):
        if i % 2:  # a rare word or two among the commonest: the case pruning is for
            words = rng.sample(vocab[len(vocab) // 3 :], rng.randint(1, 2)) + vocab[: rng.randint(2, 6)]
        else:
            words = _zipf_words(rng, vocab, rng.randint(1, 8), 0.3)
        if rng.random() < 0.2:
            words.append("neverseenword")
        query = " ".join(words)
        top_k = rng.choice([1, 3, 10, 50, 100, 400])
        k1, b = rng.choice([(1.2, 0.75), (0.9, 0.4), (2.0, 1.0), (0.5, 0.0)])
        filt = rng.choice([None, '{"half": 1}'])
        args = (ix, query, top_k, k1, b, filt)
        with conn.transaction():
            conn.execute("SET LOCAL kb.bm25_essential = '0/0'")
            pruned = conn.execute(
                "SELECT * FROM kb.bm25_search(%s, %s, %s, %s, %s, %s)", args
            ).fetchall()
            used = conn.execute("SELECT current_setting('kb.bm25_essential')").fetchone()[0]
        exhaustive = conn.execute(
            "SELECT * FROM kb._bm25_exhaustive(%s, %s, %s, %s, %s, %s)", args
        ).fetchall()
        _same(pruned, exhaustive)
        checked += bool(exhaustive)
        e, m = used.split("/")
        pruned_terms += int(m) - int(e)
    assert checked > 40
    if vocab_size > 100:  # a tiny vocabulary: every term is common, nothing to cut
        assert pruned_terms > 0  # the bounds cut terms, so the comparison tested pruning
    # Deleting documents leaves the statistics exact and the bounds valid.
    conn.execute("DELETE FROM kb.document WHERE title LIKE 'syn1%%' AND kb_id = "
                 "(SELECT id FROM kb.knowledge_base WHERE name = %s)", (f"prune{seed}",))
    for _ in range(20):
        query = " ".join(_zipf_words(rng, vocab, rng.randint(1, 6), 0.3))
        args = (ix, query, 10, 1.2, 0.75, None)
        _same(conn.execute("SELECT * FROM kb.bm25_search(%s, %s, %s, %s, %s, %s)", args).fetchall(),
              conn.execute("SELECT * FROM kb._bm25_exhaustive(%s, %s, %s, %s, %s, %s)", args).fetchall())


def test_pruned_edge_cases(conn: psycopg.Connection) -> None:
    ix = _corpus(conn, "edges", ["alpha beta", "alpha alpha gamma", "delta"])
    assert conn.execute("SELECT * FROM kb.bm25_search(%s, 'zeta', 10)", (ix,)).fetchall() == []
    assert conn.execute("SELECT * FROM kb.bm25_search(%s, 'alpha', 0)", (ix,)).fetchall() == []
    assert conn.execute("SELECT * FROM kb.bm25_search(%s, '', 10)", (ix,)).fetchall() == []
    got = conn.execute("SELECT * FROM kb.bm25_search(%s, 'alpha delta', 10)", (ix,)).fetchall()
    want = conn.execute("SELECT * FROM kb._bm25_exhaustive(%s, 'alpha delta', 10)", (ix,)).fetchall()
    assert len(got) == 3
    _same(got, want)
