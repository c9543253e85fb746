"""The kb schema's public surface, committed in tests/snapshots/public-api.txt.

Every function users call (those not named ``_...``) with its parameters, defaults and
result; every table and view with its columns; every composite type. A change to any of
them fails here until the snapshot is written again on purpose (``make api-snapshot``),
so the diff of a pull request shows what it changes for users.

kb.search's and kb.explain_search's parameters are generated from RetrievalConfig's
field order, and callers pass them by position too: they are append-only. Writing the
snapshot again refuses a list that does not start with the committed one, unless
KBPG_API_BREAKING=1 says the break is meant.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kbpg_db import sqlgen

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "public-api.txt"
UPDATE = os.environ.get("KBPG_UPDATE_API") == "1"

_FUNCTIONS = """
SELECT format('%s(%s) -> %s', p.proname, pg_get_function_arguments(p.oid),
              pg_get_function_result(p.oid))
FROM pg_proc p
WHERE p.pronamespace = 'kb'::regnamespace AND p.proname !~ '^_' AND p.prokind IN ('f', 'p')
ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
"""
_RELATIONS = """
SELECT CASE c.relkind WHEN 'v' THEN 'view' WHEN 'c' THEN 'type' ELSE 'table' END,
       c.relname,
       array_agg(format('%s %s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                        CASE WHEN a.attnotnull THEN ' not null' ELSE '' END)
                 ORDER BY a.attnum)
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'c')
GROUP BY c.relkind, c.relname
ORDER BY 1, 2
"""


def current_api(conn: psycopg.Connection[Any]) -> str:
    conn.execute("SET search_path = kb, public, pg_catalog")
    lines = ["# kbpg's public SQL surface (tests/integration/test_api_snapshot.py)", ""]
    lines += ["## functions", ""]
    lines += [f"kb.{row[0]}" for row in conn.execute(_FUNCTIONS).fetchall()]
    for kind, name, columns in conn.execute(_RELATIONS).fetchall():
        lines += ["", f"## {kind} kb.{name}", *(f"  {c}" for c in columns)]
    return "\n".join(lines) + "\n"


def search_parameters(api: str, function: str) -> list[str]:
    """The parameter names of a function's line in the snapshot."""
    line = next(x for x in api.splitlines() if x.startswith(f"kb.{function}("))
    inside = line[len(f"kb.{function}(") : line.rindex(") -> ")]
    return [m.group(1) for m in re.finditer(r"(?:^|, )(\w+) ", inside)]


def test_public_api_matches_the_snapshot(conn: psycopg.Connection[Any]) -> None:
    got = current_api(conn)
    committed = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
    if UPDATE:
        if committed and os.environ.get("KBPG_API_BREAKING") != "1":
            for function in ("search", "explain_search"):
                old = search_parameters(committed, function)[:-1]
                new = search_parameters(got, function)
                assert new[: len(old)] == old, (
                    f"kb.{function}'s parameters are append-only (callers pass them by "
                    f"position): the committed order is {old}, the new one {new}. Add a new "
                    "RetrievalConfig field after the others, or set KBPG_API_BREAKING=1 if "
                    "the break is meant."
                )
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(got)
        return
    if got != committed:
        import difflib

        diff = "\n".join(
            difflib.unified_diff(
                committed.splitlines(), got.splitlines(), "committed", "installed", lineterm=""
            )
        )
        pytest.fail(
            "the kb schema's public API changed; if that is meant, run `make api-snapshot` "
            "and commit tests/snapshots/public-api.txt\n" + diff[:8000]
        )


def test_search_parameters_are_append_only() -> None:
    """The generated parameters (between kb, query and the options object, which stays
    last and is passed by name) extend the committed ones: what a caller passing them by
    position relies on."""
    committed = SNAPSHOT.read_text()
    generated = list(sqlgen.search_options())
    assert generated[-1] == "options"
    for function in ("search", "explain_search"):
        names = search_parameters(committed, function)
        assert names[:2] == ["kb", "query"] and names[-1] == "options", names
        old = names[2:-1]
        assert generated[: len(old)] == old, (function, old, generated)
