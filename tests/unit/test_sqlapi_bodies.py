"""Every PL/Python function in sql/ is the same three lines: load kbpg_db once, import
sqlapi, call the sqlapi function of its own name with its own parameters. So the SQL
signature and the Python one cannot drift apart unnoticed, and each entry has one home."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from kbpg_db import sqlapi

SQL = sorted((Path(__file__).parents[2] / "sql").glob("*.sql"))
# The two that set PL/Python up rather than call into kbpg_db.
OWN_BODIES = {"python_init", "server_cpu_count"}
INIT = 'if GD.get("kbpg_ready") != "/*@kbpg_version*/": plpy.execute("SELECT kb.python_init()")'


def _functions() -> list[tuple[str, str, list[str], str]]:
    """(file, function, its IN parameters' names, its body) for each PL/Python function."""
    found = []
    for path in SQL:
        for part in path.read_text().split("CREATE OR REPLACE FUNCTION kb.")[1:]:
            header, _, rest = part.partition("AS $$\n")
            if "LANGUAGE plpython3u" not in header:
                continue
            name, _, params = header.partition("(")
            depth, end = 1, 0
            while depth:
                depth += {"(": 1, ")": -1}.get(params[end], 0)
                end += 1
            ins = []
            for param in " ".join(params[: end - 1].split()).split(","):
                words = param.split()
                if words and words[0] != "OUT":
                    ins.append(words[1] if words[0] == "IN" else words[0])
            found.append((path.name, name, ins, rest.partition("$$;")[0]))
    return found


FUNCTIONS = _functions()


def test_every_python_function_is_found() -> None:
    names = {f[1] for f in FUNCTIONS}
    assert len(FUNCTIONS) == sum(p.read_text().count("LANGUAGE plpython3u") for p in SQL)
    assert {"_py_build_document", "_py_bm25_search", "_py_convert_document"} <= names


@pytest.mark.parametrize(
    "where,name,params,body", [f for f in FUNCTIONS if f[1] not in OWN_BODIES], ids=lambda x: x
)
def test_a_python_body_calls_its_sqlapi_function(
    where: str, name: str, params: list[str], body: str
) -> None:
    entry = name.removeprefix("_py_")
    lines = [line for line in body.strip().splitlines()]
    assert lines[0] == INIT, f"{where} kb.{name}: first line"
    assert lines[1] == "from kbpg_db import sqlapi", f"{where} kb.{name}: second line"
    call = " ".join(line.strip() for line in lines[2:])
    fn = getattr(sqlapi, entry, None)
    assert fn is not None, f"{where} kb.{name}: no kbpg_db.sqlapi.{entry}"
    wanted = list(inspect.signature(fn).parameters)
    args = re.fullmatch(rf"return sqlapi\.{entry}\((.*)\)", call)
    assert args is not None, f"{where} kb.{name}: {call}"
    given = [a.strip() for a in args.group(1).split(",")]
    expected = (["plpy"] if wanted[0] == "plpy" else []) + params
    assert given == expected, f"{where} kb.{name} passes {given}, not its parameters"
    assert len(given) <= len(wanted), f"sqlapi.{entry} takes {wanted}"
    required = [
        p for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty
    ]
    assert len(given) >= len(required), f"sqlapi.{entry} needs {[p.name for p in required]}"
