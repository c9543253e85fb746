"""A tiny run of the benchmark code, so `make bench` keeps working. No timing asserted."""

from __future__ import annotations

import psycopg
import pytest

from bench import common
from bench.compare import compare
from bench.scale import bench_scale
from research.directions import tsv_headings, tsv_positions


@pytest.fixture
def scifact() -> None:
    if not (common.scifact_dir() / "corpus.jsonl").is_file():
        pytest.fail(f"SciFact data missing at {common.scifact_dir()} (set KBPG_SCIFACT)")


def test_synthetic_corpus_and_baselines(conn: psycopg.Connection, scifact: None) -> None:
    ix = common.build_synthetic_kb(conn, "syn", 400)
    assert (
        conn.execute("SELECT n_chunks FROM kb.kb_index WHERE id = %s", (ix,)).fetchone()[0] == 400
    )
    assert (
        conn.execute("SELECT count(*) FROM kb.embedding WHERE index_id = %s", (ix,)).fetchone()[0]
        == 400
    )
    assert (
        conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexname = %s", (f"embedding_hnsw_{ix}",)
        ).fetchone()[0]
        == 1
    )
    rare = conn.execute(
        "SELECT count(*) FROM kb.chunk WHERE metadata->>'category' = 'rare'"
    ).fetchone()[0]
    assert 20 <= rare <= 60
    assert common.build_synthetic_kb(conn, "syn", 400) == ix  # reused
    query = common.bench_queries(1)[0]
    titles = common.ts_rank_cd_run(conn, "syn", query, 10)
    assert len(titles) == len(set(titles)) <= 10
    ours = conn.execute("SELECT chunk_id FROM kb.bm25_search(%s, %s, 10)", (ix, query)).fetchall()
    assert ours
    lat = common.lat([0.001, 0.002, 0.003])
    assert lat["p50_ms"] == 2.0 and lat["n"] == 3


def test_tsv_positions_reads_a_tsvector(conn: psycopg.Connection) -> None:
    text = conn.execute(
        "SELECT setweight(to_tsvector('simple', 'it''s a cat a dog'), 'A')::text"
    ).fetchone()[0]
    assert tsv_positions(text) == {"it": [1], "s": [2], "a": [3, 5], "cat": [4], "dog": [6]}
    quoted = conn.execute("SELECT $$'it''s':2,7B$$::tsvector::text").fetchone()[0]
    assert tsv_positions(quoted) == {"it's": [2, 7]}
    assert tsv_positions("") == {}
    # Heading words are the positions weighted A (kb.chunk_tsvector).
    mixed = conn.execute(
        "SELECT (to_tsvector('simple', 'cat dog') || setweight(to_tsvector('simple', 'cat'), 'A'))"
        "::text"
    ).fetchone()[0]
    assert tsv_headings(mixed) == {"cat": 1}
    assert tsv_headings(text) == {"it": 1, "s": 1, "a": 2, "cat": 1, "dog": 1}


def test_compare_alternates_the_two_databases(
    conn: psycopg.Connection, dsn: str, scifact: None
) -> None:
    common.build_synthetic_kb(conn, "syn-ab", 300)
    out = compare([dsn, dsn], "syn-ab", {"method": "full_text"}, queries=4, rounds=3)
    assert out["first"]["n"] == out["second"]["n"] == 12
    assert out["first"]["p50_ms"] > 0 and out["second_p50_share"] > 0
    with pytest.raises(psycopg.errors.NoDataFound, match="no-such-kb"):
        compare([dsn, dsn], "no-such-kb", {}, queries=1, rounds=1)


def test_scale_bench_measures_a_small_kb_before_and_beside_a_large_one(
    dsn: str, scifact: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBPG_SCALE_CHUNKS", "600")
    monkeypatch.setenv("KBPG_SCALE_SMALL", "200")
    out = bench_scale(dsn, quick=True)
    before, beside, big = out["200_before"], out["200_beside_600"], out["600"]
    assert before["chunks_in_database"] == 200 and beside["chunks_in_database"] == 800
    for r in (before, beside, big):
        assert set(r) == {
            "chunks_in_database",
            "hybrid_first_pass",
            "hybrid",
            "full_text",
            "vector",
            "parts",
        }
        assert r["hybrid"]["p50_ms"] > 0 and r["parts"]["bm25_search_100"]["p50_ms"] > 0
    again = bench_scale(dsn, quick=True)  # the large KB is reused: no "before"
    assert "200_before" not in again and "build_seconds" not in again
