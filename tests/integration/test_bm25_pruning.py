"""kb.bm25_search returns exactly what scoring every posting in SQL returns
(kb._bm25_exhaustive): the same chunks in the same order with the same scores, on random
corpora and random queries, for any top_k, k1, b and filter, and after documents are
deleted. Both scorers: in memory (kbpg_db/bm25.py, the default) and pruned in SQL
(MaxScore, with kb.bm25_cache_mb = 0; its bounds need no upkeep). The memory scorer's
cached postings follow every write: committed or not, in this backend or another, rolled
back, and under a budget that evicts."""

from __future__ import annotations

import random
from typing import Any

import psycopg
import pytest

from bench.common import copy_chunks


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


@pytest.mark.parametrize("scorer", ["memory", "sql"])
@pytest.mark.parametrize(
    ("seed", "vocab_size", "skew", "n_docs"),
    [(1, 300, 1.0, 1500), (2, 2000, 1.4, 300), (3, 2000, 1.0, 1500), (4, 60, 0.6, 800)],
)
def test_pruned_equals_exhaustive(
    conn: psycopg.Connection, seed: int, vocab_size: int, skew: float, n_docs: int, scorer: str
) -> None:
    if scorer == "sql":
        conn.execute("SET kb.bm25_cache_mb = 0")
    rng = random.Random(seed)
    vocab = [f"w{i}x{rng.randint(0, 9)}" for i in range(vocab_size)]
    texts = [" ".join(_zipf_words(rng, vocab, rng.randint(1, 60), skew)) for _ in range(n_docs)]
    ix = _corpus(conn, f"prune{seed}", texts)
    checked = pruned_terms = 0
    for i in range(60):
        if i % 2:  # a rare word or two among the commonest: the case pruning is for
            words = (
                rng.sample(vocab[len(vocab) // 3 :], rng.randint(1, 2)) + vocab[: rng.randint(2, 6)]
            )
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
    if scorer == "sql" and vocab_size > 100:  # a tiny vocabulary: nothing to cut
        assert pruned_terms > 0  # the bounds cut terms, so the comparison tested pruning
    # Deleting documents leaves the statistics exact and the bounds valid.
    conn.execute(
        "DELETE FROM kb.document WHERE title LIKE 'syn1%%' AND kb_id = "
        "(SELECT id FROM kb.knowledge_base WHERE name = %s)",
        (f"prune{seed}",),
    )
    for _ in range(20):
        query = " ".join(_zipf_words(rng, vocab, rng.randint(1, 6), 0.3))
        args = (ix, query, 10, 1.2, 0.75, None)
        _same(
            conn.execute("SELECT * FROM kb.bm25_search(%s, %s, %s, %s, %s, %s)", args).fetchall(),
            conn.execute(
                "SELECT * FROM kb._bm25_exhaustive(%s, %s, %s, %s, %s, %s)", args
            ).fetchall(),
        )


def test_pruned_edge_cases(conn: psycopg.Connection) -> None:
    ix = _corpus(conn, "edges", ["alpha beta", "alpha alpha gamma", "delta"])
    assert conn.execute("SELECT * FROM kb.bm25_search(%s, 'zeta', 10)", (ix,)).fetchall() == []
    assert conn.execute("SELECT * FROM kb.bm25_search(%s, 'alpha', 0)", (ix,)).fetchall() == []
    assert conn.execute("SELECT * FROM kb.bm25_search(%s, '', 10)", (ix,)).fetchall() == []
    got = conn.execute("SELECT * FROM kb.bm25_search(%s, 'alpha delta', 10)", (ix,)).fetchall()
    want = conn.execute(
        "SELECT * FROM kb._bm25_exhaustive(%s, 'alpha delta', 10)", (ix,)
    ).fetchall()
    assert len(got) == 3
    _same(got, want)


def _check(conn: psycopg.Connection, ix: int, queries: list[str]) -> None:
    for query in queries:
        args = (ix, query, 20, 1.2, 0.75, None)
        _same(
            conn.execute("SELECT * FROM kb.bm25_search(%s, %s, %s, %s, %s, %s)", args).fetchall(),
            conn.execute(
                "SELECT * FROM kb._bm25_exhaustive(%s, %s, %s, %s, %s, %s)", args
            ).fetchall(),
        )


def _stats(conn: psycopg.Connection) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM kb.bm25_cache_stats()").fetchone()
    return dict(zip(("terms", "megabytes", "hits", "misses", "budget_mb"), row, strict=True))


def test_memory_scores_follow_every_write(dsn: str, conn: psycopg.Connection) -> None:
    rng = random.Random(7)
    vocab = [f"v{i}y" for i in range(400)]
    texts = [" ".join(_zipf_words(rng, vocab, rng.randint(3, 40), 1.0)) for _ in range(600)]
    ix = _corpus(conn, "cached", texts)
    kb_id = conn.execute("SELECT id FROM kb.knowledge_base WHERE name = 'cached'").fetchone()[0]
    queries = [" ".join(_zipf_words(rng, vocab, rng.randint(1, 6), 0.5)) for _ in range(25)]
    _check(conn, ix, queries)
    first = _stats(conn)
    assert first["terms"] > 0 and first["misses"] > 0 and first["budget_mb"] == 256
    _check(conn, ix, queries)  # nothing changed: every term from the cache
    again = _stats(conn)
    assert again["misses"] == first["misses"] and again["hits"] > first["hits"]

    with psycopg.connect(dsn, autocommit=True) as writer:
        # Another backend adds and deletes documents, committed.
        copy_chunks(
            writer, kb_id, ix, [" ".join(rng.sample(vocab[:30], 5)) for _ in range(40)], 10_000
        )
        writer.execute("DELETE FROM kb.document WHERE kb_id = %s AND title LIKE 'syn1%%'", (kb_id,))
        _check(conn, ix, queries)
        assert _stats(conn)["misses"] > again["misses"]  # the changed terms were read again
        # ... and not yet committed: this backend sees the postings as they were.
        with writer.transaction():
            copy_chunks(writer, kb_id, ix, [" ".join(vocab[:8])] * 30, 20_000)
            _check(conn, ix, queries)
            seen = conn.execute(
                "SELECT * FROM kb.bm25_search(%s, %s, 50)", (ix, vocab[5])
            ).fetchall()
        after = conn.execute("SELECT * FROM kb.bm25_search(%s, %s, 50)", (ix, vocab[5])).fetchall()
        assert seen != after  # the 30 new chunks hold the word: they count once committed
        _check(conn, ix, queries)

    # This backend's own uncommitted writes count, and stop counting when rolled back.
    with conn.transaction(force_rollback=True):
        copy_chunks(conn, kb_id, ix, [" ".join(vocab[3:9])] * 25, 30_000)
        _check(conn, ix, queries)
        with conn.transaction(force_rollback=True):  # a savepoint
            conn.execute(
                "DELETE FROM kb.document WHERE kb_id = %s AND title LIKE 'syn2%%'", (kb_id,)
            )
            _check(conn, ix, queries)
        _check(conn, ix, queries)
    _check(conn, ix, queries)

    # A budget smaller than the postings: terms are evicted and read again, results exact.
    conn.execute("SET kb.bm25_cache_mb = 1")
    big = _corpus(
        conn, "cached-big", [" ".join(_zipf_words(rng, vocab[:40], 60, 0.3)) for _ in range(3000)]
    )
    _check(conn, big, [" ".join(vocab[:40])] * 3 + queries[:5])
    assert _stats(conn)["megabytes"] <= 1
    # The SQL scorer gives the same answers as the memory scorer.
    memory = conn.execute("SELECT * FROM kb.bm25_search(%s, %s, 30)", (ix, queries[0])).fetchall()
    conn.execute("SET kb.bm25_cache_mb = 0")
    _same(
        conn.execute("SELECT * FROM kb.bm25_search(%s, %s, 30)", (ix, queries[0])).fetchall(),
        memory,
    )


def test_cache_setting_is_checked(conn: psycopg.Connection) -> None:
    ix = _corpus(conn, "setting", ["alpha beta", "beta gamma"])
    conn.execute("SET kb.bm25_cache_mb = 'lots'")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"kb\.bm25_cache_mb"):
        conn.execute("SELECT * FROM kb.bm25_search(%s, 'beta', 10)", (ix,))
    conn.execute("SET kb.bm25_cache_mb = 64")
    assert len(conn.execute("SELECT * FROM kb.bm25_search(%s, 'beta', 10)", (ix,)).fetchall()) == 2
