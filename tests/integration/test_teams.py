"""Teams, private knowledge bases and read-only sharing, enforced by row-level security.

Real roles (CREATE ROLE ... LOGIN), one connection each. Team A: admin (who creates the
team and shared KBs), member, creator (creates a private KB). Team B: shared (A's shared KB
is shared with B). An outsider belongs to no team. Every cell of roles by operations by KB
kinds is asserted against the rules, each in a transaction rolled back afterwards.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tests.helpers import run_worker

ROLES = ("admin", "member", "creator", "shared", "outsider")
KINDS = ("team", "private", "shared")
TABLES = (
    "knowledge_base",
    "kb_index",
    "document",
    "job",
    "chunk",
    "embedding",
    "posting",
    "term_stat",
)

# Built by the indexing worker (the schema's owner) and removed by cascade: no other role
# writes them, whatever it may write in the KB (sql/990-privileges.sql).
DERIVED = ("chunk", "embedding", "posting", "term_stat")


def readable(role: str, kind: str) -> bool:
    return {
        "team": role in ("admin", "member", "creator"),
        "private": role == "creator",
        "shared": role in ("admin", "member", "creator", "shared"),
    }[kind]


def writable(role: str, kind: str) -> bool:
    return role == "creator" if kind == "private" else role in ("admin", "member", "creator")


def manages(role: str, kind: str) -> bool:
    return role == "creator" if kind == "private" else role == "admin"


class World:
    def __init__(self, dsn: str, prefix: str) -> None:
        self.dsn = dsn
        self.prefix = prefix
        self.conns: dict[str, psycopg.Connection[Any]] = {}
        self.kb = {k: f"{prefix}_{k}" for k in KINDS}
        self.ids: dict[str, int] = {}
        self.index: dict[str, int] = {}

    def role(self, name: str) -> str:
        return f"{self.prefix}_{name}"

    def conn(self, role: str) -> psycopg.Connection[Any]:
        if role not in self.conns:
            self.conns[role] = psycopg.connect(self.dsn, user=self.role(role), autocommit=True)
        return self.conns[role]


@pytest.fixture
def world(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[World]:
    prefix = "t" + uuid.uuid4().hex[:8]
    w = World(dsn, prefix)
    for r in ROLES:
        conn.execute(f'CREATE ROLE "{w.role(r)}" LOGIN')
    try:
        admin, member, creator, shared = (w.role(r) for r in ROLES[:4])
        conn.execute("SELECT kb.create_team(%s, acting_as => %s)", (f"{prefix}_A", admin))
        conn.execute("SELECT kb.create_team(%s, acting_as => %s)", (f"{prefix}_B", shared))
        for r in (member, creator):
            conn.execute(
                "SELECT kb.add_team_member(%s, %s, acting_as => %s)", (f"{prefix}_A", r, admin)
            )
        a = w.conn("admin")
        a.execute("SELECT kb.create_knowledge_base(%s, team => %s)", (w.kb["team"], f"{prefix}_A"))
        a.execute("SELECT kb.create_knowledge_base(%s)", (w.kb["shared"],))
        a.execute("SELECT kb.share_knowledge_base(%s, %s)", (w.kb["shared"], f"{prefix}_B"))
        w.conn("creator").execute(
            "SELECT kb.create_knowledge_base(%s, private => true)", (w.kb["private"],)
        )
        for kind in KINDS:
            owner = w.conn("creator" if kind == "private" else "admin")
            owner.execute(
                "SELECT kb.add_document(%s, 'doc', %s)",
                (w.kb[kind], f"Alpha particles of the {kind} base. Beta rays follow."),
            )
        run_worker(dsn)
        for kind in KINDS:
            w.ids[kind], w.index[kind] = conn.execute(
                "SELECT id, active_index_id FROM kb.knowledge_base WHERE name = %s",
                (w.kb[kind],),
            ).fetchone()
        yield w
    finally:
        for c in w.conns.values():
            c.close()
        for r in ROLES:
            conn.execute(f'DROP ROLE IF EXISTS "{w.role(r)}"')


# Each operation returns what happened: a value, or the error's SQLSTATE.
Op = Callable[[World, psycopg.Connection[Any], str], Any]


def _rows(c: psycopg.Connection[Any], sql: str, *params: Any) -> int:
    return len(c.execute(sql, params).fetchall())


def _count(c: psycopg.Connection[Any], sql: str, *params: Any) -> int:
    return c.execute(sql, params).rowcount


OPS: dict[str, Op] = {
    "list": lambda w, c, k: (
        w.kb[k] in {r[0] for r in c.execute("SELECT name FROM kb.list_knowledge_bases()")}
    ),
    "search": lambda w, c, k: _rows(c, "SELECT * FROM kb.search(%s, 'alpha particles')", w.kb[k]),
    "explain": lambda w, c, k: _rows(c, "SELECT * FROM kb.explain_search(%s, 'beta')", w.kb[k]),
    "build_context": lambda w, c, k: c.execute(
        "SELECT context <> '' FROM kb.build_context(%s, 'alpha')", (w.kb[k],)
    ).fetchone()[0],
    "add_document": lambda w, c, k: _rows(c, "SELECT kb.add_document(%s, 'new', 'x')", w.kb[k]),
    "replace_document": lambda w, c, k: _rows(
        c, "SELECT kb.put_document(%s, 'doc', 'replaced')", w.kb[k]
    ),
    "delete_document": lambda w, c, k: c.execute(
        "SELECT kb.delete_document(%s, 'doc')", (w.kb[k],)
    ).fetchone()[0],
    "reindex": lambda w, c, k: _rows(c, "SELECT kb.reindex_knowledge_base(%s)", w.kb[k]),
    "set_retrieval_config": lambda w, c, k: _rows(
        c, "SELECT kb.set_retrieval_config(%s, '{\"top_k\": 3}')", w.kb[k]
    ),
    "drop": lambda w, c, k: c.execute("SELECT kb.drop_knowledge_base(%s)", (w.kb[k],)).fetchone()[
        0
    ],
    "share": lambda w, c, k: _rows(
        c, "SELECT kb.share_knowledge_base(%s, %s)", w.kb[k], f"{w.prefix}_C"
    ),
    "unshare": lambda w, c, k: _rows(
        c, "SELECT kb.unshare_knowledge_base(%s, %s)", w.kb[k], f"{w.prefix}_B"
    ),
    "raw_insert_document": lambda w, c, k: _count(
        c,
        "INSERT INTO kb.document (kb_id, title, content, content_hash) "
        "VALUES (%s, 'raw', 'raw', md5('raw'))",
        w.ids[k],
    ),
    "raw_insert_chunk": lambda w, c, k: _count(
        c,
        "INSERT INTO kb.chunk (index_id, kb_id, document_id, ordinal, content, token_count, "
        "char_start, char_end, tsv, doc_len) "
        "SELECT %s, kb_id, id, 99, 'raw', 1, 0, 3, 'raw'::tsvector, 1 "
        "FROM kb.document WHERE kb_id = %s",
        w.index[k],
        w.ids[k],
    ),
    "raw_update_kb": lambda w, c, k: _count(
        c, "UPDATE kb.knowledge_base SET description = 'x' WHERE id = %s", w.ids[k]
    ),
    "raw_delete_kb": lambda w, c, k: _count(
        c, "DELETE FROM kb.knowledge_base WHERE id = %s", w.ids[k]
    ),
}
# A harmless change per table (chunks refuse updates by design, a trigger: delete only).
UPDATES = {
    "kb_index": "error = error",
    "document": "title = title",
    "job": "progress = progress",
    "embedding": "embedding = embedding",
    "posting": "tf = tf",
    "term_stat": "df = df",
}


def _key(w: World, kind: str, col: str) -> int:
    return w.index[kind] if col == "index_id" else w.ids[kind]


for _t in TABLES:
    _col = (
        "id"
        if _t == "knowledge_base"
        else ("kb_id" if _t in ("kb_index", "document", "job") else "index_id")
    )
    OPS[f"raw_select_{_t}"] = lambda w, c, k, t=_t, col=_col: c.execute(
        f"SELECT count(*) > 0 FROM kb.{t} WHERE {col} = %s", (_key(w, k, col),)
    ).fetchone()[0]
    if _t in UPDATES:
        OPS[f"raw_update_{_t}"] = lambda w, c, k, t=_t, col=_col: _count(
            c, f"UPDATE kb.{t} SET {UPDATES[t]} WHERE {col} = %s", _key(w, k, col)
        )
    if _t != "knowledge_base":
        OPS[f"raw_delete_{_t}"] = lambda w, c, k, t=_t, col=_col: _count(
            c, f"DELETE FROM kb.{t} WHERE {col} = %s", _key(w, k, col)
        )


def expected(op: str, role: str, kind: str) -> Any:
    """The rules, written out: a value the operation returns, or the SQLSTATE it raises."""
    r, wr, m = readable(role, kind), writable(role, kind), manages(role, kind)
    hidden = "P0002"  # a KB you cannot read does not exist for you
    denied = "42501"
    if op == "list" or op.startswith("raw_select_"):
        return r
    if op in ("search", "explain"):
        return True if r else hidden
    if op == "build_context":
        return True if r else hidden
    if op in (
        "add_document",
        "replace_document",
        "reindex",
        "set_retrieval_config",
        "delete_document",
    ):
        return True if wr else (denied if r else hidden)
    if op == "drop":
        return True if m else (denied if r else hidden)
    if op == "share":
        if not r:
            return hidden
        if not m:
            return denied
        return "KB010" if kind == "private" else True
    if op == "unshare":
        if not r:
            return hidden
        if not m:
            return denied
        return True if kind == "shared" else hidden  # only the shared KB is shared with B
    if op == "raw_insert_document":
        return True if wr else denied
    if op == "raw_delete_kb":
        return m
    if op == "raw_insert_chunk" or op.removeprefix("raw_update_") in DERIVED:
        return denied
    if op.removeprefix("raw_delete_") in DERIVED:
        return denied
    if op.startswith(("raw_update_", "raw_delete_")):
        return wr
    raise AssertionError(op)


def _normal(value: Any) -> Any:
    return value > 0 if isinstance(value, int) and not isinstance(value, bool) else value


CELLS = list(itertools.product(OPS, ROLES, KINDS))


def test_the_access_matrix(world: World, conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT kb.create_team(%s)", (f"{world.prefix}_C",))
    failures = []
    for op, role, kind in CELLS:
        c = world.conn(role)
        try:
            with c.transaction(force_rollback=True):
                got = _normal(OPS[op](world, c, kind))
        except psycopg.Error as exc:
            got = exc.sqlstate
        want = expected(op, role, kind)
        if got != want:
            failures.append(f"{op} by {role} on the {kind} KB: got {got!r}, expected {want!r}")
    assert not failures, f"{len(failures)} of {len(CELLS)} cells wrong:\n" + "\n".join(failures)


def _state(c: psycopg.Connection[Any], sql: str, *params: Any) -> Any:
    try:
        with c.transaction(force_rollback=True):
            return c.execute(sql, params).fetchall()
    except psycopg.Error as exc:
        return exc.sqlstate, exc.diag.message_primary


def test_sharing_errors_have_their_own_codes(world: World) -> None:
    a = world.conn("admin")
    b = f"{world.prefix}_B"
    team_a = f"{world.prefix}_A"
    assert _state(a, "SELECT kb.share_knowledge_base(%s, %s)", world.kb["shared"], b) == (
        "KB012",
        f'kb_already_shared: knowledge base "{world.kb["shared"]}" is already shared with team '
        f'"{b}"',
    )
    assert _state(a, "SELECT kb.share_knowledge_base(%s, %s)", world.kb["team"], team_a)[0] == (
        "KB011"
    )
    got = _state(
        world.conn("creator"), "SELECT kb.share_knowledge_base(%s, %s)", world.kb["private"], b
    )
    assert got[0] == "KB010" and got[1].startswith("private_kb_cannot_be_shared")
    got = _state(a, "SELECT kb.share_knowledge_base(%s, %s, 'write')", world.kb["team"], b)
    assert got == ("22023", "permission must be read_only (got 'write')")
    # Writes on a KB shared read-only say so, and name the owning team.
    got = _state(world.conn("shared"), "SELECT kb.add_document(%s, 'x', 'y')", world.kb["shared"])
    assert got == (
        "42501",
        f'knowledge base "{world.kb["shared"]}" is shared with your team read-only',
    )


def test_listing_own_and_shared(world: World) -> None:
    def names(role: str, **kw: Any) -> dict[str, str]:
        args = ", ".join(f"{k} => %s" for k in kw)
        rows = world.conn(role).execute(
            f"SELECT name, access FROM kb.list_knowledge_bases({args})", list(kw.values())
        )
        return {n: acc for n, acc in rows if n.startswith(world.prefix)}

    kb = world.kb
    assert names("shared") == {kb["shared"]: "read_only"}
    assert names("shared", own_only=True) == {}
    assert names("shared", include_shared=False) == {}
    assert names("admin") == {kb["team"]: "read_write", kb["shared"]: "read_write"}
    assert names("creator") == {k: "read_write" for k in kb.values()}
    assert names("creator", team=f"{world.prefix}_B") == {}
    assert names("outsider") == {}


def test_team_tables_and_the_llm_cache(world: World, conn: psycopg.Connection[Any]) -> None:
    member = world.conn("member")
    rows = member.execute("SELECT member FROM kb.team_member").fetchall()
    assert rows == [(world.role("member"),)]  # only its own membership
    assert world.conn("outsider").execute("SELECT count(*) FROM kb.team").fetchone()[0] == 0
    shares = world.conn("shared").execute("SELECT count(*) FROM kb.kb_share").fetchone()[0]
    assert shares == 1 and member.execute("SELECT count(*) FROM kb.kb_share").fetchone()[0] == 0
    assert _state(member, "SELECT count(*) FROM kb.llm_call")[0] == "42501"
    assert _state(member, "INSERT INTO kb.team_member VALUES (1, 'x')")[0] == "42501"
    # Acting as another role needs the session to be that role (or a member of it).
    got = _state(
        world.conn("outsider"),
        "SELECT kb.create_team('mine', acting_as => %s)",
        world.role("admin"),
    )
    assert got[0] == "42501" and "cannot act as" in got[1]
    got = _state(
        member, "SELECT kb.add_team_member(%s, %s)", f"{world.prefix}_A", world.role("outsider")
    )
    assert got == ("42501", f'only an admin of team "{world.prefix}_A" can change its members')


def test_page_index_tables_follow_the_kb(world: World, conn: psycopg.Connection[Any]) -> None:
    a = world.conn("admin")
    name = f"{world.prefix}_tree"
    a.execute('SELECT kb.create_knowledge_base(%s, \'{"strategy": "page_index"}\')', (name,))
    a.execute("SELECT kb.add_document(%s, 'guide', '# Install\nRun it.\n# Use\nCall it.')", (name,))
    run_worker(world.dsn)
    sql = "SELECT count(*) FROM kb.page_index_nodes WHERE kb = %s"
    assert conn.execute(sql, (name,)).fetchone()[0] == 2
    assert world.conn("member").execute(sql, (name,)).fetchone()[0] == 2
    status = "SELECT count(*) FROM kb.document_status WHERE kb = %s"
    assert world.conn("member").execute(status, (name,)).fetchone()[0] == 1
    for role in ("shared", "outsider"):
        assert world.conn(role).execute(sql, (name,)).fetchone()[0] == 0
        assert world.conn(role).execute(status, (name,)).fetchone()[0] == 0
        assert (
            world.conn(role)
            .execute(
                "SELECT count(*) FROM kb.page_index_toc t JOIN "
                "kb.knowledge_base k ON k.active_index_id = t.index_id "
                "WHERE k.name = %s",
                (name,),
            )
            .fetchone()[0]
            == 0
        )


HOSTILE = [
    "x'); DROP TABLE kb.chunk; --",
    '"; DELETE FROM kb.document; --',
    "%s %I %L $1",
    "$$; SELECT pg_sleep(0); $$",
    "' OR '1'='1",
    "kb.knowledge_base",
    "\\' OR 1=1 --",
    "naïve ٩(◕‿◕)۶ \U0001d518",
]
# Errors a hostile string may cause: bad input, unknown object, no right, taken name.
FINE = {
    "22023",
    "22P02",
    "22000",
    "P0002",
    "42501",
    "42704",
    "23505",
    "KB010",
    "KB011",
    "KB012",
    "54000",
    "55006",
    "22004",
    "23502",
}


def test_hostile_strings_change_nothing_they_may_not(
    world: World, conn: psycopg.Connection[Any]
) -> None:
    def snapshot() -> Any:
        return conn.execute(
            "SELECT (SELECT count(*) FROM kb.knowledge_base), (SELECT count(*) FROM kb.document), "
            "(SELECT count(*) FROM kb.chunk), (SELECT count(*) FROM kb.team), "
            "(SELECT count(*) FROM kb.kb_share), (SELECT count(*) FROM kb.team_member)"
        ).fetchone()

    before = snapshot()
    calls = [
        "SELECT kb.create_knowledge_base(%(s)s, '{}', '{}', %(s)s, %(s)s)",
        "SELECT * FROM kb.search(%(s)s, %(s)s)",
        "SELECT * FROM kb.search(%(kb)s, %(s)s, method => %(s)s)",
        "SELECT * FROM kb.search(%(kb)s, %(s)s)",
        "SELECT * FROM kb.build_context(%(kb)s, %(s)s)",
        "SELECT * FROM kb.explain_search(%(kb)s, %(s)s)",
        "SELECT * FROM kb.tree_search(%(kb)s, %(s)s)",
        "SELECT kb.add_document(%(kb)s, %(s)s, %(s)s, '{}', %(s)s, %(s)s)",
        "SELECT kb.delete_document(%(kb)s, %(s)s)",
        "SELECT kb.reindex_document(%(kb)s, %(s)s)",
        "SELECT kb.drop_knowledge_base(%(s)s)",
        "SELECT kb.create_team(%(s)s)",
        "SELECT kb.add_team_member(%(s)s::text, %(s)s::name, %(s)s::text)",
        "SELECT kb.remove_team_member(%(s)s::text, %(s)s::name)",
        "SELECT kb.share_knowledge_base(%(kb)s, %(s)s, %(s)s)",
        "SELECT kb.unshare_knowledge_base(%(s)s, %(s)s)",
        "SELECT * FROM kb.knowledge_base_shares(%(s)s)",
        "SELECT * FROM kb.list_knowledge_bases(team => %(s)s)",
        "SELECT kb.validate_config(%(s)s, '{}', %(s)s)",
        "SELECT kb.default_config(%(s)s)",
        "SELECT * FROM kb.preview_chunks(%(s)s)",
        "SELECT kb.count_tokens(%(s)s)",
        "SELECT kb.embed_query(%(kb)s, %(s)s)",
        "SELECT kb.set_retrieval_config(%(kb)s, jsonb_build_object('method', %(s)s::text))",
        "SELECT kb.create_team('t', acting_as => %(s)s::name)",
    ]
    unexpected = []
    for role in ("outsider", "shared", "member"):
        c = world.conn(role)
        for sql in calls:
            for s in HOSTILE:
                try:
                    with c.transaction(force_rollback=True):
                        c.execute(sql, {"s": s, "kb": world.kb["shared"]}).fetchall()
                except psycopg.Error as exc:
                    if exc.sqlstate not in FINE:
                        unexpected.append(f"{role}: {sql} with {s!r}: {exc.sqlstate} {exc}")
    assert not unexpected, "\n".join(unexpected[:20])
    assert snapshot() == before


def test_which_team_a_new_kb_joins(world: World, conn: psycopg.Connection[Any]) -> None:
    # The owner or a superuser in several teams still creates in "default" unless told.
    conn.execute("SELECT kb.create_team(%s)", (f"{world.prefix}_ops",))
    conn.execute("SELECT kb.create_knowledge_base(%s)", (f"{world.prefix}_mine",))
    team = conn.execute(
        "SELECT t.name FROM kb.knowledge_base k JOIN kb.team t ON t.id = k.team_id "
        "WHERE k.name = %s",
        (f"{world.prefix}_mine",),
    ).fetchone()[0]
    assert team == "default"
    # A role in two teams says which; in none, it is told how to get one.
    conn.execute(
        "SELECT kb.add_team_member(%s, %s, acting_as => %s)",
        (f"{world.prefix}_B", world.role("member"), world.role("shared")),
    )
    got = _state(world.conn("member"), "SELECT kb.create_knowledge_base('two')")
    assert got == (
        "22023",
        f'role "{world.role("member")}" belongs to several teams ({world.prefix}_A, '
        f"{world.prefix}_B); say which",
    )
    got = _state(world.conn("outsider"), "SELECT kb.create_knowledge_base('none')")
    assert got == ("42501", f'role "{world.role("outsider")}" belongs to no team')
    got = _state(
        world.conn("outsider"),
        "SELECT kb.create_knowledge_base('x', team => %s)",
        f"{world.prefix}_A",
    )
    assert got[0] == "42501"
