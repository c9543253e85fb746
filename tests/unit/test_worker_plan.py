"""How a worker sizes itself: connections and each one's ONNX threads."""

from __future__ import annotations

import pytest

from kbpg.worker import AUTO_MAX_CONNECTIONS, Worker, plan_connections


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
