"""One table of SQLSTATEs (kbpg_db.sqlstates): what the SQL and the PL/Python raise, what
the client's classes and the lab's HTTP statuses are, and what docs/errors.md lists."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from kbpg_db import sqlstates
from kbpg_db.sqlstates import BY_CODE, BY_NAME, STATES

from kbpg import errors
from kbpg.lab import LabError

ROOT = Path(__file__).resolve().parents[2]
SQL = sorted((ROOT / "sql").glob("*.sql")) + sorted((ROOT / "migrations").glob("*.sql"))
PYTHON = sorted((ROOT / "plpython" / "kbpg_db").rglob("*.py"))


def _raised_in_sql() -> set[str]:
    found = set()
    for path in SQL:
        text = path.read_text()
        for name in re.findall(r"ERRCODE\s*=\s*'([A-Za-z0-9_]+)'", text):
            found.add(name)
        found.update(re.findall(r"sqlstate=\"([0-9A-Z]{5})\"", text))  # PL/Python bodies
    return found


def _raised_in_python() -> set[str]:
    """Codes the PL/Python modules raise: literals, and sqlstates' named constants."""
    constants = {k: v for k, v in vars(sqlstates).items() if k.isupper() and isinstance(v, str)}
    found = set()
    for path in PYTHON:
        if path.name == "sqlstates.py":
            continue
        text = path.read_text()
        found.update(re.findall(r"sqlstate=\"([0-9A-Z]{5})\"", text))
        found.update(v for k, v in constants.items() if re.search(rf"\b{k}\b", text))
    return found


def test_every_code_raised_is_in_the_table_and_every_code_in_it_is_raised() -> None:
    raised = _raised_in_sql() | _raised_in_python()
    unknown = {r for r in raised if r not in BY_CODE and r not in BY_NAME}
    assert not unknown, f"raised but not in kbpg_db/sqlstates.py: {sorted(unknown)}"
    used = {BY_NAME[r].code if r in BY_NAME else r for r in raised}
    assert {s.code for s in STATES} == used


def test_names_are_postgresql_condition_names_or_ours() -> None:
    for s in STATES:
        if s.code.startswith("KB"):  # ours: a class PostgreSQL leaves free, our own names
            assert re.fullmatch(r"[a-z_]+", s.name)
            with pytest.raises(KeyError):
                psycopg.errors.lookup(s.name)
        else:
            camel = "".join(part.title() for part in s.name.split("_"))
            assert psycopg.errors.lookup(s.code).__name__ == camel, s


def test_the_client_raises_each_codes_class() -> None:
    for s in STATES:
        cls = getattr(errors, s.error)
        assert issubclass(cls, errors.KbpgError)
        assert errors._BY_SQLSTATE[s.code] is cls
    exc = psycopg.errors.lookup("42501")("x")
    assert isinstance(errors.from_db(exc), errors.KbpgError)


@pytest.mark.parametrize("state", STATES, ids=lambda s: s.code)
def test_the_lab_answers_each_code_with_its_status(state: sqlstates.SqlState) -> None:
    class Diag:
        sqlstate = state.code
        message_primary = "m"
        message_hint = None

    class Exc(Exception):
        diag = Diag()

    assert LabError.from_db(Exc()).status == state.http


def test_the_error_docs_list_every_code() -> None:
    readme = (ROOT / "docs" / "errors.md").read_text()
    table = dict(re.findall(r"^\| `([0-9A-Z]{5})` \| `?([A-Za-z]+Error)`? \|", readme, re.M))
    assert table == {s.code: s.error for s in STATES}
