"""SQL markers: expanded in code, left alone where a ``--`` comment quotes them."""

from __future__ import annotations

import pytest
from kbpg_db import sqlgen


def test_markers_expand_in_code_not_in_comments() -> None:
    body = "-- the list comes from /*@usage_modes*/ at install\nSELECT ARRAY[/*@usage_modes*/];"
    out = sqlgen.expand(body)
    assert out.splitlines()[0] == "-- the list comes from /*@usage_modes*/ at install"
    assert out.splitlines()[1] == "SELECT ARRAY['rag', 'system', 'policy'];"


def test_an_unknown_marker_is_an_error() -> None:
    with pytest.raises(KeyError, match="unknown SQL marker /\\*@nope\\*/"):
        sqlgen.expand("SELECT /*@nope*/1")
