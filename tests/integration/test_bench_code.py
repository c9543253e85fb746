"""A tiny run of the benchmark code, so `make bench` keeps working. No timing asserted."""

from __future__ import annotations

import psycopg
import pytest

from bench import common
from bench.scale import bench_scale


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
