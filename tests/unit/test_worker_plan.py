"""How a worker sizes itself: connections and each one's ONNX threads."""

from __future__ import annotations

import pytest

from kbpg.worker import (
    AUTO_MAX_CONNECTIONS,
    LARGE_DOCUMENT_BYTES,
    Worker,
    claim_size,
    job_threads,
    plan_connections,
)


def test_one_connection_per_core_each_with_its_share_of_the_threads() -> None:
    assert plan_connections(2, "", None, None) == (2, 1)
    assert plan_connections(8, "", None, None) == (AUTO_MAX_CONNECTIONS, 8 // AUTO_MAX_CONNECTIONS)
    assert plan_connections(1, "", None, None) == (1, None)  # one connection: ONNX's default


def test_asked_for_connections_share_the_cores() -> None:
    assert plan_connections(2, "", 1, None) == (1, None)
    assert plan_connections(4, "", 2, None) == (2, 2)
    assert plan_connections(2, "", 3, None) == (3, 1)  # never below one thread


def test_the_servers_own_setting_stands_unless_threads_are_asked_for() -> None:
    assert plan_connections(4, "3", None, None) == (4, None)
    assert plan_connections(4, "3", 2, 2) == (2, 2)
    assert plan_connections(2, "", 1, 2) == (1, 2)


def test_claims_shrink_at_the_end_of_the_queue() -> None:
    assert claim_size(64, 16, 2) == 16  # the worker counts at most 2 x batch x connections
    assert claim_size(40, 16, 2) == 10  # half a connection's share
    assert claim_size(3, 16, 2) == 1
    assert claim_size(0, 16, 2) == 1
    assert claim_size(64, 1, 2) == 1
    assert claim_size(30, 16, 1) == 16  # one connection: whole batches
    assert claim_size(14, 16, 1) == 14


def test_only_a_large_document_takes_the_idle_connections_cores() -> None:
    small, large = LARGE_DOCUMENT_BYTES - 1, LARGE_DOCUMENT_BYTES
    assert job_threads(4, 1, 2, small) == 2  # a short job: its share, no second model load
    assert job_threads(4, 1, 2, large) == 4
    assert job_threads(4, 2, 2, large) == 2
    assert job_threads(4, 1, 2, None) == 4  # a file not converted yet
    assert job_threads(2, 0, 1, large) == 2
    assert job_threads(2, 3, 1, large) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency must be at least 1"),
        ({"model_threads": 0}, "model_threads must be at least 1"),
    ],
)
def test_bad_sizes_are_refused(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Worker("dbname=unused", **kwargs)
