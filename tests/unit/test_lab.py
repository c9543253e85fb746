"""The lab's pieces that need no server: test-set lines and the loopback rule."""

from __future__ import annotations

import pytest

from kbpg.lab import LabError
from kbpg.lab.app import is_loopback
from kbpg.lab.testsets import parse_lines


def test_test_set_lines() -> None:
    text = "# a comment\n\nhow long are refunds? => Refunds\nwho approves leave? => Handbook › Leave; HR\n"
    assert parse_lines(text) == [
        ("how long are refunds?", ["Refunds"]),
        ("who approves leave?", ["Handbook › Leave", "HR"]),
    ]
    for bad, where in [
        ("no arrow here", "line 1"),
        ("q =>", "line 1"),
        ("ok => A\n=> B", "line 2"),
    ]:
        with pytest.raises(LabError, match=where):
            parse_lines(bad)
    with pytest.raises(LabError, match="at least one query"):
        parse_lines("# only a comment")


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.8.0.1"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.5", "example.com"))
