"""The read path is ready to be distributed by kb_id (Citus; README "Beyond one machine").

Citus runs a statement on the one node holding a knowledge base when every distributed
(per-KB) table in it is filtered by kb_id, directly or through a kb_id join to another
that is. Citus is not packaged for this machine, so this cannot be run against it; what is
checked instead is that invariant, statement by statement: the functions every read entry
point reaches (found by walking the calls in their bodies, PL/pgSQL, SQL, the dynamic SQL
they format, and the SQL strings of the PL/Python they call) never read a per-KB table
without an equality on its kb_id."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pglast
import psycopg
import pytest
from pglast import ast as pg
from pglast.enums.parsenodes import A_Expr_Kind
from pglast.enums.primnodes import BoolExprType
from pglast.visitors import Visitor

from tests.integration.test_schema import REFERENCE_TABLES

# What applications call to read one KB; everything they reach must route by kb_id.
READ_ENTRY_POINTS = (
    "search", "explain_search", "build_context", "tree_search", "embed_query", "score_query",
    "run_test_set", "test_sets", "media", "graph_definitions", "graph_members",
    "graph_callers", "graph_callees", "graph_subclasses", "graph_imports",
    "graph_heading_tree", "graph_neighbours", "graph_entities", "graph_relations",
    "graph_communities",
)
PLPYTHON = Path(__file__).parents[2] / "plpython" / "kbpg_db"
SQL_START = re.compile(r"^\s*(SELECT|WITH|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


@dataclass
class Finding:
    where: str
    problem: str


@dataclass
class Catalog:
    tables: set[str]  # every relation of schema kb (tables and views)
    per_kb: set[str]
    functions: dict[str, list[tuple[str, str]]]  # name -> [(language, definition)]
    findings: list[Finding] = field(default_factory=list)


def _conjuncts(node: Any) -> Iterator[Any]:
    if node is None:
        return
    if isinstance(node, pg.BoolExpr) and node.boolop == BoolExprType.AND_EXPR:
        for arg in node.args:
            yield from _conjuncts(arg)
    else:
        yield node


def _column(node: Any) -> tuple[str, ...] | None:
    if isinstance(node, pg.ColumnRef) and all(isinstance(f, pg.String) for f in node.fields):
        return tuple(f.sval for f in node.fields)
    if isinstance(node, pg.TypeCast):
        return _column(node.arg)
    return None


def _kb_id_pinned(quals: list[Any], aliases: set[str]) -> set[str]:
    """The aliases (of this statement's relations) whose kb_id the quals fix to one value:
    alias.kb_id = <a value> (a parameter, a variable, a constant, an outer query's column),
    or alias.kb_id = other.kb_id where the other is fixed. Equalities between kb_ids alone
    fix nothing."""
    parent = {a: a for a in aliases}

    def find(a: str) -> str:
        while parent[a] != a:
            a = parent[a]
        return a

    def local(node: Any) -> tuple[str | None, bool]:
        """(alias, is its kb_id) for a column of this statement; (None, False) else."""
        col = _column(node)
        if col is None:
            return None, False
        if len(col) == 1:  # unqualified kb_id: the one relation's; another name: a variable
            if col[0] == "kb_id" and len(aliases) == 1:
                return next(iter(aliases)), True
            return None, False
        if col[-2] in aliases:
            return col[-2], col[-1] == "kb_id"
        return None, False

    anchored: set[str] = set()
    for q in quals:
        for c in _conjuncts(q):
            if not (
                isinstance(c, pg.A_Expr)
                and c.kind == A_Expr_Kind.AEXPR_OP
                and [n.sval for n in c.name] == ["="]
            ):
                continue
            (la, lk), (ra, rk) = local(c.lexpr), local(c.rexpr)
            if lk and rk:
                parent[find(la)] = find(ra)  # type: ignore[arg-type]
            elif lk and ra is None and not any(
                isinstance(n, pg.ColumnRef) and local(n)[0] for n in _walk(c.rexpr)
            ):
                anchored.add(la)  # type: ignore[arg-type]
            elif rk and la is None and not any(
                isinstance(n, pg.ColumnRef) and local(n)[0] for n in _walk(c.lexpr)
            ):
                anchored.add(ra)  # type: ignore[arg-type]
    roots = {find(a) for a in anchored}
    return {a for a in aliases if find(a) in roots}


class _Statements(Visitor):  # type: ignore[misc]
    """Checks each SELECT, UPDATE and DELETE of one parsed body; collects the calls."""

    def __init__(self, cat: Catalog, where: str) -> None:
        super().__init__()
        self.cat = cat
        self.where = where
        self.calls: set[str] = set()
        self.ctes: set[str] = set()

    def visit_CommonTableExpr(self, _ancestors: Any, node: Any) -> None:
        self.ctes.add(node.ctename)

    def visit_FuncCall(self, _ancestors: Any, node: Any) -> None:
        name = [n.sval for n in node.funcname]
        if (len(name) == 2 and name[0] == "kb") or (
            len(name) == 1 and name[0] in self.cat.functions
        ):
            self.calls.add(name[-1])

    def _from(self, items: Any, rels: list[Any], quals: list[Any]) -> None:
        for item in items or ():
            if isinstance(item, (pg.RangeVar, pg.RangeFunction, pg.RangeSubselect)):
                rels.append(item)
            elif isinstance(item, pg.JoinExpr):
                quals.append(item.quals)
                self._from([item.larg, item.rarg], rels, quals)

    def _check(self, rels: list[Any], quals: list[Any]) -> None:
        # Every name of this FROM is local: a function's or a subquery's kb_id column fixes
        # nothing (a value must be a parameter, a variable or a constant).
        names = {r.alias.aliasname for r in rels if r.alias is not None}
        names |= {r.relname for r in rels if isinstance(r, pg.RangeVar) and r.alias is None}
        pinned = _kb_id_pinned(quals, names)
        for rv in rels:
            if not isinstance(rv, pg.RangeVar):
                continue
            if rv.schemaname not in (None, "kb"):
                continue
            if rv.schemaname is None and rv.relname in self.ctes:
                continue
            if rv.relname not in self.cat.tables:
                continue
            if rv.relname in REFERENCE_TABLES:
                continue
            alias = rv.alias.aliasname if rv.alias else rv.relname
            if rv.relname not in self.cat.per_kb:
                self.cat.findings.append(Finding(self.where, f"reads the view kb.{rv.relname}"))
            elif alias not in pinned:
                self.cat.findings.append(
                    Finding(self.where, f"reads kb.{rv.relname} {alias} without {alias}.kb_id = …")
                )

    def visit_SelectStmt(self, _ancestors: Any, node: Any) -> None:
        rels: list[Any] = []
        quals: list[Any] = [node.whereClause]
        self._from(node.fromClause, rels, quals)
        self._check(rels, quals)

    def visit_UpdateStmt(self, _ancestors: Any, node: Any) -> None:
        rels: list[Any] = [node.relation]
        quals: list[Any] = [node.whereClause]
        self._from(node.fromClause, rels, quals)
        self._check(rels, quals)

    def visit_DeleteStmt(self, _ancestors: Any, node: Any) -> None:
        rels: list[Any] = [node.relation]
        quals: list[Any] = [node.whereClause]
        self._from(node.usingClause, rels, quals)
        self._check(rels, quals)


def _render_format(call: Any) -> str | None:
    """The SQL a format(template, args...) call produces, args rendered as a placeholder
    identifier, or as their string (the longest branch of a CASE of strings)."""
    if not (isinstance(call, pg.FuncCall) and [n.sval for n in call.funcname] == ["format"]):
        return None
    template, *args = call.args

    def text(node: Any) -> str | None:
        if isinstance(node, pg.A_Const) and isinstance(node.val, pg.String):
            return str(node.val.sval)
        return None

    if text(template) is None:
        return None
    values: list[str] = []
    for a in args:
        if text(a) is not None:
            values.append(str(text(a)))
        elif isinstance(a, pg.CaseExpr):
            branches = [text(w.result) for w in a.args] + [text(a.defresult)]
            values.append(max((b for b in branches if b is not None), key=len, default="x"))
        else:
            values.append("x")
    nxt = iter(values)

    def sub(m: re.Match[str]) -> str:
        return values[int(m.group(1)) - 1] if m.group(1) else next(nxt)

    return re.sub(r"%(?:(\d+)\$)?[sIL]", sub, str(template.val.sval))


def _plpgsql_queries(definition: str) -> Iterator[tuple[str, bool]]:
    """(SQL, dynamic) for every statement and expression of a PL/pgSQL function."""

    def walk(node: Any) -> Iterator[tuple[str, bool]]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "PLpgSQL_expr":
                    query, mode = value["query"], value.get("parseMode", 0)
                    if mode == 0:
                        yield query, False
                    elif mode in (3, 4, 5):  # an assignment: target[.field] := expression
                        yield "SELECT " + query.split(":=", 1)[1], False
                    else:
                        yield "SELECT " + query, False
                elif key == "dynquery":
                    yield "SELECT " + value["PLpgSQL_expr"]["query"], True
                else:
                    yield from walk(value)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)

    # The PL/pgSQL parser pglast carries resolves types in no schema but pg_catalog and
    # public: kb's types become record (variables; text[] for arrays, text for parameters
    # and results), which changes no statement.
    head, body = definition.split("AS $function$", 1)
    name, params = head.split("(", 1)
    params = re.sub(r"\bkb\.\w+(\[\])?", "text", params)
    body = re.sub(r"(?m)^(\s*\w+\s+)kb\.\w+\[\](?=\s*(;|:=|DEFAULT))", r"\1text[]", body)
    body = re.sub(r"(?m)^(\s*\w+\s+)kb\.\w+(?=\s*(;|:=|DEFAULT))", r"\1record", body)
    yield from walk(pglast.parse_plpgsql(f"{name}({params}AS $function${body}"))


def _python_sql(entry: str) -> Iterator[tuple[str, str]]:
    """(where, SQL) of the SQL strings the PL/Python entry sqlapi.<entry> can run: the
    sqlapi functions it reaches by name, and every string of the kbpg_db modules they
    import."""
    source = (PLPYTHON / "sqlapi.py").read_text()
    defs = {
        n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)
    }
    seen: set[str] = set()
    todo = [entry]
    modules: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        for node in ast.walk(defs[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo.append(node.func.id)
            if isinstance(node, ast.ImportFrom) and node.module == "kbpg_db":
                modules.update(a.name for a in node.names)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if SQL_START.match(node.value):
                    yield f"sqlapi.{name}", node.value
    for module in sorted(modules):
        path = PLPYTHON / f"{module}.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if SQL_START.match(node.value):
                    yield f"kbpg_db.{module}", node.value


def _check_sql(cat: Catalog, where: str, sql: str) -> set[str]:
    """Checks one SQL text (PL/Python's $1 parameters allowed); returns the kb functions
    it calls."""
    try:
        tree = pglast.parse_sql(sql)
    except pglast.parser.ParseError as exc:
        cat.findings.append(Finding(where, f"cannot parse {sql[:60]!r}: {exc}"))
        return set()
    v = _Statements(cat, where)
    # The CTE names first: a body may read a CTE before the visitor reaches its WITH.
    for node in tree:
        for sub in _walk(node):
            if isinstance(sub, pg.CommonTableExpr):
                v.ctes.add(sub.ctename)
    v(tree)
    return v.calls


def _walk(node: Any) -> Iterator[Any]:
    if isinstance(node, pg.Node):
        yield node
        for attr in node:
            yield from _walk(getattr(node, attr))
    elif isinstance(node, (tuple, list)):
        for item in node:
            yield from _walk(item)


def _read_path(conn: psycopg.Connection) -> tuple[Catalog, list[str]]:
    rels = conn.execute(
        "SELECT c.relname, c.relkind FROM pg_class c "
        "WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')"
    ).fetchall()
    tables = {r for r, _ in rels}
    per_kb = {r for r, k in rels if k in ("r", "p")} - REFERENCE_TABLES
    functions: dict[str, list[tuple[str, str]]] = {}
    for name, lang, definition in conn.execute(
        "SELECT p.proname, l.lanname, pg_get_functiondef(p.oid) FROM pg_proc p "
        "JOIN pg_language l ON l.oid = p.prolang "
        "WHERE p.pronamespace = 'kb'::regnamespace AND p.prokind = 'f'"
    ):
        functions.setdefault(name, []).append((lang, definition))
    cat = Catalog(tables, per_kb, functions)
    visited: list[str] = []
    todo = list(READ_ENTRY_POINTS)
    while todo:
        name = todo.pop()
        if name in visited:
            continue
        visited.append(name)
        calls: set[str] = set()
        for lang, definition in cat.functions[name]:
            where = f"kb.{name}"
            if lang == "sql":
                body = definition.split("AS $function$", 1)[1].rsplit("$function$", 1)[0]
                calls |= _check_sql(cat, where, body)
            elif lang == "plpgsql":
                for sql, dynamic in _plpgsql_queries(definition):
                    if dynamic:
                        call = pglast.parse_sql(sql)[0].stmt.targetList[0].val
                        rendered = _render_format(call)
                        if rendered is None:
                            cat.findings.append(Finding(where, f"dynamic SQL not checked: {sql}"))
                            continue
                        sql = rendered
                    calls |= _check_sql(cat, where, sql)
            elif lang == "plpython3u":
                for entry in re.findall(r"sqlapi\.(\w+)\(", definition):
                    for place, sql in _python_sql(entry):
                        calls |= _check_sql(cat, f"{where} → {place}", sql)
        todo.extend(sorted(calls - set(visited)))
    return cat, visited


def test_every_read_statement_is_pinned_to_one_kb(conn: psycopg.Connection) -> None:
    cat, visited = _read_path(conn)
    # The walk reaches the whole read path, the PL/Python parts included.
    for name in ("_search_core", "_search_rows", "_bm25_search", "_vector_search",
                 "_graph_channel", "_graph_edges", "_entity_peers", "_tree_search",
                 "_py_tree_search", "_prepare_query", "_rerank", "_assemble_context",
                 "_get_kb_by_id", "_active_index", "_graph_index", "_graph_symbol",
                 "_graph_reference_rows"):
        assert name in visited, name
    # The public building blocks look their KB up by index id and are not on this path.
    assert not {"bm25_search", "vector_search", "_index_kb", "query_lexemes"} & set(visited)
    assert [f"{f.where}: {f.problem}" for f in cat.findings] == []


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("SELECT 1 FROM kb.posting p WHERE p.index_id = 1", "reads kb.posting p without"),
        (
            "SELECT 1 FROM kb.chunk c JOIN kb.embedding e ON e.chunk_id = c.id "
            "WHERE c.kb_id = 1",
            "reads kb.embedding e without",
        ),
        (
            "SELECT (SELECT count(*) FROM kb.chunk x) FROM kb.chunk c WHERE c.kb_id = 1",
            "reads kb.chunk x without",
        ),
        ("SELECT 1 FROM kb.document_status", "reads the view kb.document_status"),
        ("DELETE FROM kb.job j WHERE j.id = 1", "reads kb.job j without"),
    ],
)
def test_the_check_finds_a_statement_not_pinned(
    conn: psycopg.Connection, sql: str, problem: str
) -> None:
    """The checker is not vacuous: each of these statements is caught."""
    cat, _ = _read_path(conn)
    cat.findings.clear()
    _check_sql(cat, "probe", sql)
    assert [f.problem for f in cat.findings if f.problem.startswith(problem)], cat.findings
    ok = Catalog(cat.tables, cat.per_kb, cat.functions)
    _check_sql(ok, "probe", "SELECT 1 FROM kb.chunk c JOIN kb.embedding e "
               "ON e.chunk_id = c.id AND e.kb_id = c.kb_id WHERE c.kb_id = $1")
    assert ok.findings == []
