"""The ingestion benchmark's arithmetic: worker segments against raw runs either side."""

from __future__ import annotations

import pytest

from bench.ingest import ingest_ratio


def test_a_segment_is_set_against_the_mean_of_the_raw_rates_either_side() -> None:
    # 100 chunks; raw ran at 40 before and 60 after (mean 50: 2 s); the worker took 2.5 s.
    out = ingest_ratio([2.5], [100], {"procs": [(40.0, 60.0)]})
    assert out["ratio"] == 0.8
    assert out["segment_ratios"] == [0.8]
    assert out["raw_model_chunks_per_s"] == 50.0
    assert out["worker_chunks_per_s"] == 40.0


def test_segments_add_up_by_time_not_by_averaging_their_ratios() -> None:
    # Raw 1 s + 1 s; the worker 1 s and 3 s: 2 / 4 = 0.5 (the ratios' mean would be 0.67).
    out = ingest_ratio([1.0, 3.0], [50, 50], {"procs": [(50.0, 50.0), (50.0, 50.0)]})
    assert out["ratio"] == 0.5
    assert out["segment_ratios"] == [1.0, 0.333]


def test_the_better_raw_configuration_over_all_segments_is_the_reference() -> None:
    rates = {
        "threads": [(40.0, 40.0), (80.0, 80.0)],  # 2.5 + 1.25 = 3.75 s
        "procs": [(50.0, 50.0), (50.0, 50.0)],  # 2 + 2 = 4 s
    }
    out = ingest_ratio([2.0, 2.0], [100, 100], rates)
    assert out["raw_configuration"] == "threads"  # better in all, though not in each segment
    assert out["ratio"] == round(3.75 / 4.0, 3)


def test_a_missing_measurement_is_an_error() -> None:
    with pytest.raises(ValueError, match="one pair of raw rates per segment"):
        ingest_ratio([1.0, 1.0], [10, 10], {"procs": [(10.0, 10.0)]})
    with pytest.raises(ValueError, match="one worker time"):
        ingest_ratio([1.0], [10, 10], {"procs": [(10.0, 10.0), (10.0, 10.0)]})
