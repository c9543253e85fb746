"""Reads and writes are ready to be distributed by kb_id (Citus; README "Beyond one
machine").

Citus runs a statement on the one node holding a knowledge base when every distributed
(per-KB) table in it is filtered by kb_id, directly or through a kb_id join to another
that is. Citus is not packaged for this machine, so this cannot be run against it; what is
checked instead is that invariant, statement by statement: the functions every read and
write entry point reaches (found by walking the calls in their bodies, PL/pgSQL, SQL, the
dynamic SQL they build, and the SQL strings of the PL/Python they call) never read or
change a per-KB table without an equality on its kb_id. A view read so must itself join
its per-KB tables by kb_id (a co-located join), and every view does."""

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
    "search",
    "explain_search",
    "build_context",
    "tree_search",
    "embed_query",
    "score_query",
    "run_test_set",
    "test_sets",
    "media",
    "graph_definitions",
    "graph_members",
    "graph_callers",
    "graph_callees",
    "graph_subclasses",
    "graph_imports",
    "graph_heading_tree",
    "graph_neighbours",
    "graph_entities",
    "graph_relations",
    "graph_communities",
)
# What writers, the worker and the triggers call; one KB's rows per statement as well.
WRITE_ENTRY_POINTS = (
    "create_knowledge_base",
    "drop_knowledge_base",
    "set_retrieval_config",
    "put_document",
    "add_document",
    "add_file",
    "add_url",
    "delete_document",
    "reindex_document",
    "set_document_chunking",
    "set_document_usage_mode",
    "list_documents",
    "reindex_knowledge_base",
    "claim_jobs",
    "process_job",
    "fail_job",
    "release_job",
    "renew_leases",
    "prefetch_embeddings",
    "queue_status",
    "refresh_communities",
    "refresh_stale_communities",
    "create_test_set",
    "add_test_query",
    "delete_test_set",
    "preview_chunks",
    "_chunk_after_insert",
    "_chunk_after_delete",
    "_graph_node_gone",
    "_document_metadata_sync",
    "_document_chunking_check",
    "add_source",
    "drop_source",
    "sync_plan",
    "bind_document",
    "move_document",
    "finish_sync",
    "retry_failed",
    "add_table_source",
    "apply_source_changes",
    "_table_source_triggers",
    "add_url_source",
    "refresh_url_sources",
)
# Functions whose job is to find which KBs have work: their plain SELECTs (no row locks)
# may read every KB's rows; Citus runs such a read on every node. What they then change
# or lock is one KB's.
SPANS_KBS = {
    "claim_jobs": "which KBs have due jobs; each claim then locks one KB's",
    "queue_status": "the queue of every KB, counted (what kbpg status shows)",
    "refresh_stale_communities": "which KBs' communities are stale; each refresh is one KB's",
    "apply_source_changes": "which table sources have changes waiting; each is applied as its KB's",
    "refresh_url_sources": "which web sources are due; each page is queued as its KB's",
}
# Columns of the reference tables that hold a KB's id: equal to a per-KB table's kb_id,
# they pass its value on, as kb_id columns do.
KB_KEYS = {("knowledge_base", "id"), ("kb_share", "kb_id")}
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
    views: dict[str, str] = field(default_factory=dict)  # name -> definition
    findings: list[Finding] = field(default_factory=list)
    checked_views: set[str] = field(default_factory=set)


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


def _kb_id_pinned(
    quals: list[Any], aliases: set[str], keys: dict[str, str] | None = None
) -> set[str]:
    """The aliases (of this statement's relations) whose kb_id the quals fix to one value:
    alias.kb_id = <a value> (a parameter, a variable, a constant, an outer query's column),
    or alias.kb_id = other.kb_id where the other is fixed. Equalities between kb_ids alone
    fix nothing. keys names, per alias, its KB key column where that is not kb_id (a
    reference table's: knowledge_base.id)."""
    keys = keys or {}
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
            only = next(iter(aliases)) if len(aliases) == 1 else None
            if only is not None and col[0] == keys.get(only, "kb_id"):
                return only, True
            return None, False
        if col[-2] in aliases:
            return col[-2], col[-1] == keys.get(col[-2], "kb_id")
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
            elif (
                lk
                and ra is None
                and not any(isinstance(n, pg.ColumnRef) and local(n)[0] for n in _walk(c.rexpr))
            ):
                anchored.add(la)  # type: ignore[arg-type]
            elif (
                rk
                and la is None
                and not any(isinstance(n, pg.ColumnRef) and local(n)[0] for n in _walk(c.lexpr))
            ):
                anchored.add(ra)  # type: ignore[arg-type]
    roots = {find(a) for a in anchored}
    return {a for a in aliases if find(a) in roots}


class _Statements(Visitor):  # type: ignore[misc]
    """Checks each SELECT, UPDATE and DELETE of one parsed body; collects the calls."""

    def __init__(self, cat: Catalog, where: str, spans: bool = False) -> None:
        super().__init__()
        self.cat = cat
        self.where = where
        self.spans = spans  # plain SELECTs may read every KB's rows (SPANS_KBS)
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

    def _check(self, rels: list[Any], quals: list[Any], plain_select: bool = False) -> None:
        if self.spans and plain_select:
            return
        # Every name of this FROM is local: a function's or a subquery's kb_id column fixes
        # nothing (a value must be a parameter, a variable or a constant).
        names = {r.alias.aliasname for r in rels if r.alias is not None}
        names |= {r.relname for r in rels if isinstance(r, pg.RangeVar) and r.alias is None}
        keys = {
            (rv.alias.aliasname if rv.alias else rv.relname): column
            for rv in rels
            if isinstance(rv, pg.RangeVar) and rv.schemaname in (None, "kb")
            for table, column in KB_KEYS
            if rv.relname == table
        }
        pinned = _kb_id_pinned(quals, names, keys)
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
                if alias not in pinned:
                    self.cat.findings.append(
                        Finding(
                            self.where, f"reads the view kb.{rv.relname} without {alias}.kb_id = …"
                        )
                    )
                else:
                    _check_view(self.cat, rv.relname)
            elif alias not in pinned:
                self.cat.findings.append(
                    Finding(self.where, f"reads kb.{rv.relname} {alias} without {alias}.kb_id = …")
                )

    def visit_SelectStmt(self, _ancestors: Any, node: Any) -> None:
        rels: list[Any] = []
        quals: list[Any] = [node.whereClause]
        self._from(node.fromClause, rels, quals)
        self._check(rels, quals, plain_select=not node.lockingClause)

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
    identifier, or as their string (the longest branch of a CASE of strings); or the SQL of
    a string constant."""
    if isinstance(call, pg.A_Const) and isinstance(call.val, pg.String):
        return str(call.val.sval)
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
    # Nor does it know an OUT parameter by its qualified name (INTO fn.param).
    short = name.rsplit(".", 1)[-1].strip()
    for out in re.findall(r"\bOUT\s+(\w+)", params):
        body = re.sub(rf"\b{short}\.{out}\b", out, body)
    yield from walk(pglast.parse_plpgsql(f"{name}({params}AS $function${body}"))


def _imported_modules(tree: ast.AST) -> set[str]:
    """The kbpg_db modules a piece of code imports, as paths under plpython/kbpg_db."""
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kbpg_db"):
            package = "/".join(node.module.split(".")[1:])  # type: ignore[union-attr]
            if (PLPYTHON / f"{package}.py").is_file():  # from kbpg_db.convert import X
                modules.add(package)
            else:  # from kbpg_db[.package] import module
                for a in node.names:
                    name = f"{package}/{a.name}".lstrip("/")
                    if (PLPYTHON / f"{name}.py").is_file() or (PLPYTHON / name).is_dir():
                        modules.add(name)
    return modules


def _python_sql(entry: str) -> Iterator[tuple[str, str]]:
    """(where, SQL) of the SQL strings the PL/Python entry sqlapi.<entry> can run: the
    sqlapi functions it reaches by name, and every string of the kbpg_db modules they
    import, and of the modules those import in turn."""
    source = (PLPYTHON / "sqlapi.py").read_text()
    defs = {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    seen: set[str] = set()
    todo = [entry]
    modules: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        modules |= _imported_modules(defs[name])
        for node in ast.walk(defs[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo.append(node.func.id)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if SQL_START.match(node.value):
                    yield f"sqlapi.{name}", node.value
    pending, done = sorted(modules), set()
    while pending:
        module = pending.pop()
        if module in done:
            continue
        done.add(module)
        path = PLPYTHON / module
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
        for tree in (ast.parse(f.read_text()) for f in files):
            pending.extend(sorted(_imported_modules(tree) - done))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    if SQL_START.match(node.value):
                        yield f"kbpg_db.{module}", node.value


def _check_sql(cat: Catalog, where: str, sql: str, spans: bool = False) -> set[str]:
    """Checks one SQL text (PL/Python's $1 parameters allowed); returns the kb functions
    it calls."""
    try:
        tree = pglast.parse_sql(sql)
    except pglast.parser.ParseError as exc:
        cat.findings.append(Finding(where, f"cannot parse {sql[:60]!r}: {exc}"))
        return set()
    return _check_tree(cat, where, tree, spans)


def _check_tree(cat: Catalog, where: str, tree: Any, spans: bool = False) -> set[str]:
    v = _Statements(cat, where, spans)
    # The CTE names first: a body may read a CTE before the visitor reaches its WITH.
    for node in tree:
        for sub in _walk(node):
            if isinstance(sub, pg.CommonTableExpr):
                v.ctes.add(sub.ctename)
    v(tree)
    return v.calls


def _check_view(cat: Catalog, name: str) -> None:
    """A view read with its kb_id fixed routes when its own per-KB tables are joined by
    kb_id to the one its kb_id column comes from: checked as if that one's kb_id were a
    parameter. A view without a kb_id column cannot be read for one KB."""
    where = f"view kb.{name}"
    if any(f.where == where for f in cat.findings) or name in cat.checked_views:
        return
    cat.checked_views.add(name)
    stmt = pglast.parse_sql(cat.views[name])[0].stmt
    source = next(
        (
            _column(t.val)
            for t in stmt.targetList
            if (t.name or (_column(t.val) or ("",))[-1]) == "kb_id"
        ),
        None,
    )
    if source is None or len(source) != 2:
        cat.findings.append(Finding(where, "has no kb_id column of one of its tables"))
        return
    pin = pg.A_Expr(
        kind=A_Expr_Kind.AEXPR_OP,
        name=(pg.String(sval="="),),
        lexpr=pg.ColumnRef(fields=(pg.String(sval=source[0]), pg.String(sval=source[1]))),
        rexpr=pg.ParamRef(number=1),
    )
    stmt.whereClause = (
        pin
        if stmt.whereClause is None
        else pg.BoolExpr(boolop=BoolExprType.AND_EXPR, args=(stmt.whereClause, pin))
    )
    _check_tree(cat, where, (pg.RawStmt(stmt=stmt),))


def _walk(node: Any) -> Iterator[Any]:
    if isinstance(node, pg.Node):
        yield node
        for attr in node:
            yield from _walk(getattr(node, attr))
    elif isinstance(node, (tuple, list)):
        for item in node:
            yield from _walk(item)


def _catalog(conn: psycopg.Connection) -> Catalog:
    rels = conn.execute(
        "SELECT c.relname, c.relkind, CASE WHEN c.relkind = 'v' THEN pg_get_viewdef(c.oid) END "
        "FROM pg_class c "
        "WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')"
    ).fetchall()
    tables = {r for r, _, _ in rels}
    per_kb = {r for r, k, _ in rels if k in ("r", "p")} - REFERENCE_TABLES
    functions: dict[str, list[tuple[str, str]]] = {}
    for name, lang, definition in conn.execute(
        "SELECT p.proname, l.lanname, pg_get_functiondef(p.oid) FROM pg_proc p "
        "JOIN pg_language l ON l.oid = p.prolang "
        "WHERE p.pronamespace = 'kb'::regnamespace AND p.prokind = 'f'"
    ):
        functions.setdefault(name, []).append((lang, definition))
    views = {r: d for r, k, d in rels if k == "v"}
    return Catalog(tables, per_kb, functions, views)


def _reach(conn: psycopg.Connection, entry_points: tuple[str, ...]) -> tuple[Catalog, list[str]]:
    """Checks every statement of the functions the entry points reach."""
    cat = _catalog(conn)
    visited: list[str] = []
    todo = list(entry_points)
    while todo:
        name = todo.pop()
        if name in visited:
            continue
        visited.append(name)
        calls: set[str] = set()
        spans = name in SPANS_KBS
        for lang, definition in cat.functions[name]:
            where = f"kb.{name}"
            if lang == "sql":
                body = definition.split("AS $function$", 1)[1].rsplit("$function$", 1)[0]
                calls |= _check_sql(cat, where, body, spans)
            elif lang == "plpgsql":
                for sql, dynamic in _plpgsql_queries(definition):
                    if dynamic:
                        call = pglast.parse_sql(sql)[0].stmt.targetList[0].val
                        rendered = _render_format(call)
                        if rendered is None:
                            cat.findings.append(Finding(where, f"dynamic SQL not checked: {sql}"))
                            continue
                        sql = rendered
                    calls |= _check_sql(cat, where, sql, spans)
            elif lang == "plpython3u":
                for entry in re.findall(r"sqlapi\.(\w+)\(", definition):
                    for place, sql in _python_sql(entry):
                        calls |= _check_sql(cat, f"{where} → {place}", sql, spans)
        todo.extend(sorted(calls - set(visited)))
    return cat, visited


def test_every_read_statement_is_pinned_to_one_kb(conn: psycopg.Connection) -> None:
    cat, visited = _reach(conn, READ_ENTRY_POINTS)
    # The walk reaches the whole read path, the PL/Python parts included.
    for name in (
        "_search_core",
        "_search_rows",
        "_bm25_search",
        "_vector_search",
        "_graph_channel",
        "_graph_edges",
        "_entity_peers",
        "_tree_search",
        "_py_tree_search",
        "_prepare_query",
        "_rerank",
        "_assemble_context",
        "_get_kb_by_id",
        "_active_index",
        "_graph_index",
        "_graph_symbol",
        "_graph_reference_rows",
    ):
        assert name in visited, name
    # The public building blocks look their KB up by index id and are not on this path.
    assert not {"bm25_search", "vector_search", "_index_kb", "query_lexemes"} & set(visited)
    assert [f"{f.where}: {f.problem}" for f in cat.findings] == []


def test_every_write_statement_is_pinned_to_one_kb(conn: psycopg.Connection) -> None:
    """Indexing too: a job is claimed, run, failed and released by its KB and id, a
    generation is built, stored, activated and dropped by its KB, and the statistics
    triggers work KB by KB."""
    cat, visited = _reach(conn, WRITE_ENTRY_POINTS)
    for name in (
        "_enqueue",
        "_fail_job",
        "_cancel_job",
        "_build_document",
        "_convert_document",
        "_py_convert_document",
        "_py_prefetch_embeddings",
        "_store_media",
        "_maybe_activate",
        "_drop_index",
        "_clear_index",
        "_upsert_document",
        "_keep_file",
        "_py_refresh_communities",
        "_communities_stale",
    ):
        assert name in visited, name
    # list_documents reads a view for one KB: the view's joins were checked too.
    assert "document_status" in cat.checked_views
    assert [f"{f.where}: {f.problem}" for f in cat.findings] == []


def test_every_view_joins_its_tables_by_kb_id(conn: psycopg.Connection) -> None:
    """Each view has a kb_id column, and read for one kb_id it reads that KB's rows only:
    its tables are joined by kb_id, so Citus can run it on the KB's node (or, unfiltered,
    on every node without moving rows between them)."""
    cat = _catalog(conn)
    assert len(cat.views) >= 8
    for name in sorted(cat.views):
        _check_view(cat, name)
    assert [f"{f.where}: {f.problem}" for f in cat.findings] == []


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("SELECT 1 FROM kb.posting p WHERE p.index_id = 1", "reads kb.posting p without"),
        (
            "SELECT 1 FROM kb.chunk c JOIN kb.embedding e ON e.chunk_id = c.id WHERE c.kb_id = 1",
            "reads kb.embedding e without",
        ),
        (
            "SELECT (SELECT count(*) FROM kb.chunk x) FROM kb.chunk c WHERE c.kb_id = 1",
            "reads kb.chunk x without",
        ),
        ("SELECT 1 FROM kb.document_status", "reads the view kb.document_status"),
        ("DELETE FROM kb.job j WHERE j.id = 1", "reads kb.job j without"),
        (
            "SELECT 1 FROM kb.knowledge_base k JOIN kb.document d ON d.kb_id = k.id "
            "WHERE k.name = $1",
            "reads kb.document d without",
        ),
    ],
)
def test_the_check_finds_a_statement_not_pinned(
    conn: psycopg.Connection, sql: str, problem: str
) -> None:
    """The checker is not vacuous: each of these statements is caught."""
    cat = _catalog(conn)
    _check_sql(cat, "probe", sql)
    assert [f.problem for f in cat.findings if f.problem.startswith(problem)], cat.findings
    ok = _catalog(conn)
    for fine in (
        "SELECT 1 FROM kb.chunk c JOIN kb.embedding e "
        "ON e.chunk_id = c.id AND e.kb_id = c.kb_id WHERE c.kb_id = $1",
        # A reference table's KB id passes a value on.
        "SELECT 1 FROM kb.knowledge_base k JOIN kb.document d ON d.kb_id = k.id WHERE k.id = $1",
    ):
        _check_sql(ok, "probe", fine)
    assert ok.findings == []


def test_the_check_finds_a_view_or_a_lock_not_pinned(conn: psycopg.Connection) -> None:
    """A view whose join leaves kb_id out is caught when it is read for one KB, and a
    function that may read every KB's rows may not lock them that way."""
    cat = _catalog(conn)
    cat.views["document_status"] = cat.views["document_status"].replace(
        "(j.kb_id = d.kb_id) AND", "", 1
    )
    _check_sql(cat, "probe", "SELECT 1 FROM kb.document_status s WHERE s.kb_id = $1")
    assert [f.problem for f in cat.findings] == ["reads kb.job j without j.kb_id = …"]
    cat = _catalog(conn)
    _check_view(cat, "knowledge_base_usage")
    assert cat.findings == []
    cat.views["knowledge_base_usage"] = cat.views["knowledge_base_usage"].replace(
        "k.id AS kb_id", "k.id AS kb"
    )
    cat.checked_views.clear()
    _check_view(cat, "knowledge_base_usage")
    assert [f.problem for f in cat.findings] == ["has no kb_id column of one of its tables"]
    cat = _catalog(conn)
    _check_sql(cat, "probe", "SELECT j.kb_id FROM kb.job j WHERE j.status = 'queued'", True)
    assert cat.findings == []
    _check_sql(
        cat,
        "probe",
        "SELECT j.id FROM kb.job j WHERE j.status = 'queued' FOR UPDATE SKIP LOCKED",
        True,
    )
    assert [f.problem for f in cat.findings] == ["reads kb.job j without j.kb_id = …"]
