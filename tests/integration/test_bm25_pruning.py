"""Pruned BM25 (MaxScore in kb.bm25_search) returns exactly what scoring every posting
returns (kb._bm25_exhaustive): the same chunks in the same order with the same scores, on
random corpora and random queries, for any top_k, k1, b and filter, and after documents
are deleted (the bounds need no upkeep)."""

from __future__ import annotations

import random
from typing import Any

import psycopg
import pytest


def _corpus(conn: psycopg.Connection, name: str, texts: list[str]) -> int:
    """A KB whose chunks are ``texts``, written directly (BM25 needs no vectors)."""
    conn.execute("SELECT kb.create_knowledge_base(%s)", (name,))
    ix, kb_id = conn.execute(
        "SELECT active_index_id, id FROM kb.knowledge_base WHERE name = %s", (name,)
    ).fetchone()
    with conn.cursor().copy(
        "COPY kb.document (kb_id, title, content, content_hash, status, chunk_count) FROM STDIN"
    ) as cp:
        for i, t in enumerate(texts):
            cp.write_row((kb_id, f"d{i}", t, f"h{i}", "ready", 1))
    conn.execute(
        "INSERT INTO kb.chunk (index_id, document_id, ordinal, content, token_count, char_start, "
        "char_end, metadata, tsv, doc_len) SELECT %s, d.id, 0, d.content, 0, 0, length(d.content), "
        "jsonb_build_object('half', d.id %% 2), to_tsvector('english', d.content), "
        "kb.tsvector_length(to_tsvector('english', d.content)) FROM kb.document d "
        "WHERE d.kb_id = %s",
        (ix, kb_id),
    )
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


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pruned_equals_exhaustive(conn: psycopg.Connection, seed: int) -> None:
    rng = random.Random(seed)
    vocab = [f"w{i}x{rng.randint(0, 9)}" for i in range(rng.choice([50, 300, 2000]))]
    skew = rng.choice([0.6, 1.0, 1.4])
    texts = [
        " ".join(_zipf_words(rng, vocab, rng.randint(1, 60), skew))
        for _ in range(rng.choice([300, 1500]))
    ]
    ix = _corpus(conn, f"prune{seed}", texts)
    checked = pruned_terms = 0
    for _ in range(60):
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
    assert pruned_terms > 0  # the bounds did cut terms, so the comparison tested pruning
    # Deleting documents leaves the statistics exact and the bounds valid.
    conn.execute("DELETE FROM kb.document WHERE title LIKE 'd1%%' AND kb_id = "
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
