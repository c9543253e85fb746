"""What no role may do, tried the way an attacker would: every SECURITY DEFINER function
called as an outsider with ids that are not its own, raw SQL on what kbpg builds, session
settings that used to be switches, off-boarding typos, and a session open across an upgrade.

The rules themselves (who reads and writes which KB) are test_teams.py's access matrix.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from kbpg_db import __version__, sqlgen

import kbpg.migrate
from kbpg.cluster import Cluster
from kbpg.migrate import migrate
from tests.helpers import run_worker

DOCS = {
    "alpha": "Alpha particles are helium nuclei. They travel a few centimetres in air.",
    "beta": "Beta rays are electrons. Aluminium foil stops them; alpha particles too.",
}

KNOWN_KEY = "4f" * 32


@dataclass
class World:
    dsn: str
    prefix: str
    kb: str = ""
    kb_id: int = 0
    index_id: int = 0
    team_id: int = 0
    source_id: int = 0  # a table source of the KB, attached by the admin
    source_relation: int = 0
    conns: dict[str, psycopg.Connection[Any]] = field(default_factory=dict)

    def role(self, name: str) -> str:
        return f"{self.prefix}_{name}"

    def conn(self, name: str) -> psycopg.Connection[Any]:
        if name not in self.conns:
            self.conns[name] = psycopg.connect(self.dsn, user=self.role(name), autocommit=True)
        return self.conns[name]


@pytest.fixture
def world(dsn: str, conn: psycopg.Connection[Any]) -> Iterator[World]:
    """Team A (admin, member) with an indexed KB; an outsider in no team."""
    w = World(dsn, "s" + uuid.uuid4().hex[:8])
    for r in ("admin", "member", "outsider"):
        conn.execute(f'CREATE ROLE "{w.role(r)}" LOGIN')
    try:
        team = f"{w.prefix}_A"
        conn.execute("SELECT kb.create_team(%s, acting_as => %s)", (team, w.role("admin")))
        conn.execute(
            "SELECT kb.add_team_member(%s, %s, acting_as => %s)",
            (team, w.role("member"), w.role("admin")),
        )
        w.kb = f"{w.prefix}_kb"
        a = w.conn("admin")
        a.execute("SELECT kb.create_knowledge_base(%s, team => %s)", (w.kb, team))
        for title, text in DOCS.items():
            a.execute("SELECT kb.add_document(%s, %s, %s)", (w.kb, title, text))
        run_worker(dsn)
        w.kb_id, w.index_id, w.team_id = conn.execute(
            "SELECT id, active_index_id, team_id FROM kb.knowledge_base WHERE name = %s", (w.kb,)
        ).fetchone()
        items = f'public."{w.prefix}_items"'
        conn.execute(f"CREATE TABLE {items} (id integer PRIMARY KEY, body text)")
        conn.execute(f'GRANT SELECT, TRIGGER ON {items} TO "{w.role("admin")}"')
        w.source_id = a.execute(
            "SELECT kb.add_table_source(%s, %s, 'id', ARRAY['body'])", (w.kb, items)
        ).fetchone()[0]
        w.source_relation = conn.execute("SELECT %s::regclass::oid", (items,)).fetchone()[0]
        # A cached LLM answer (the worker writes these), its key the request's sha256.
        conn.execute(
            "INSERT INTO kb.llm_call (key, model, purpose, request, response) "
            "VALUES (%s, 'openai/m', 'summary', '{}', 'the answer')",
            (KNOWN_KEY,),
        )
        yield w
    finally:
        for c in w.conns.values():
            c.close()
        conn.execute(f'DROP TABLE IF EXISTS public."{w.prefix}_items"')
        for r in ("admin", "member", "outsider"):
            conn.execute(f'DROP ROLE IF EXISTS "{w.role(r)}"')


def snapshot(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Every kb table's rows (count and a digest) and every index in the schema."""
    out: dict[str, Any] = {}
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'kb' AND c.relkind IN ('r', 'p') ORDER BY 1"
        )
    ]
    for t in tables:
        out[t] = conn.execute(
            f"SELECT count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) "
            f"FROM kb.{t} x"
        ).fetchone()
    out["indexes"] = sorted(
        r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'kb'")
    )
    out["functions"] = conn.execute(
        "SELECT md5(string_agg(p.oid::regprocedure::text || p.prosrc, '|' ORDER BY p.oid)) "
        "FROM pg_proc p WHERE p.pronamespace = 'kb'::regnamespace"
    ).fetchone()
    return out


def _outcome(c: psycopg.Connection[Any], sql: str, params: tuple[Any, ...]) -> Any:
    try:
        return ("rows", c.execute(sql, params).fetchall())
    except psycopg.Error as exc:
        return ("error", exc.sqlstate)


# Each SECURITY DEFINER function of kb, called by a role in no team with another team's
# ids and names: what it must answer (rows, or the SQLSTATE it raises). A new one fails
# test_every_definer_function_is_tried until it is added here.
def definer_calls(w: World) -> dict[str, tuple[str, tuple[Any, ...], Any]]:
    admin, team = w.role("admin"), f"{w.prefix}_A"
    return {
        # Lookups the policies and kbpg's caller-rights functions evaluate.
        "kb._readable_kbs(name)": ("SELECT kb._readable_kbs(%s)", (admin,), ("rows", [([],)])),
        "kb._readable_indexes(name)": (
            "SELECT kb._readable_indexes(%s)",
            (admin,),
            ("rows", [([],)]),
        ),
        "kb._team_name(integer,name)": (
            "SELECT kb._team_name(%s, %s)",
            (w.team_id, admin),
            ("rows", [(None,)]),
        ),
        # Read by exact key only: the whole request, which holds what the answer is made
        # from; no pattern or prefix finds one.
        "kb._llm_cache_get(text[])": (
            "SELECT * FROM kb._llm_cache_get(%s)",
            (["%", KNOWN_KEY[:8], "", KNOWN_KEY + " "],),
            ("rows", []),
        ),
        "kb._server_setting(text)": (
            "SELECT kb._server_setting('shared_buffers')",
            (),
            ("rows", [(None,)]),
        ),
        # Names are unique across teams: it says a name is taken, and only that.
        "kb._kb_name_taken(text)": ("SELECT kb._kb_name_taken(%s)", (w.kb,), ("rows", [(True,)])),
        # Team and sharing functions: acting as a role it is not, or on what it cannot see.
        "kb.create_team(text,name)": (
            "SELECT kb.create_team(%s, acting_as => %s)",
            (f"{w.prefix}_X", admin),
            ("error", "42501"),
        ),
        "kb.add_team_member(text,name,text,name)": (
            "SELECT kb.add_team_member(%s, %s)",
            (team, w.role("outsider")),
            ("error", "42501"),
        ),
        "kb.remove_team_member(text,name,name)": (
            "SELECT kb.remove_team_member(%s, %s)",
            (team, w.role("member")),
            ("error", "42501"),
        ),
        "kb.share_knowledge_base(text,text,text,name)": (
            "SELECT kb.share_knowledge_base(%s, %s)",
            (w.kb, team),
            ("error", "P0002"),
        ),
        "kb.unshare_knowledge_base(text,text,name)": (
            "SELECT kb.unshare_knowledge_base(%s, %s, acting_as => %s)",
            (w.kb, team, admin),
            ("error", "42501"),
        ),
        "kb.knowledge_base_shares(text,name)": (
            "SELECT * FROM kb.knowledge_base_shares(%s)",
            (w.kb,),
            ("error", "P0002"),
        ),
        # Table sources' triggers: only for a source row as it must be.
        "kb._attach_table_source(integer,bigint)": (
            "SELECT kb._attach_table_source(%s, %s)",
            (w.kb_id, w.source_id),
            ("error", "42501"),
        ),
        "kb._detach_table_source(integer,bigint,oid)": (
            "SELECT kb._detach_table_source(%s, %s, %s)",
            (w.kb_id, w.source_id, w.source_relation),
            ("rows", [("",)]),  # void: nothing done
        ),
    }


def definers(conn: psycopg.Connection[Any]) -> dict[str, tuple[bool, int]]:
    """signature -> (is a trigger function, oid)."""
    return {
        sig: (trigger, oid)
        for sig, trigger, oid in conn.execute(
            "SELECT p.oid::regprocedure::text, "
            "       p.prorettype IN ('trigger'::regtype, 'event_trigger'::regtype), p.oid "
            "FROM pg_proc p WHERE p.pronamespace = 'kb'::regnamespace AND p.prosecdef"
        )
    }


def test_every_definer_function_is_tried(world: World, conn: psycopg.Connection[Any]) -> None:
    """Called as an outsider with another team's ids, no SECURITY DEFINER function changes
    anything or tells anything; the trigger ones cannot be called at all."""
    found = definers(conn)
    calls = definer_calls(world)
    triggers = {sig for sig, (trigger, _) in found.items() if trigger}
    assert set(found) - triggers == set(calls), "a SECURITY DEFINER function is not tried here"
    assert {s for s in found if s.startswith("kb._")} - triggers <= {
        "kb._readable_kbs(name)",
        "kb._readable_indexes(name)",
        "kb._team_name(integer,name)",
        "kb._llm_cache_get(text[])",
        "kb._server_setting(text)",
        "kb._kb_name_taken(text)",
        "kb._attach_table_source(integer,bigint)",
        "kb._detach_table_source(integer,bigint,oid)",
    }, "an internal SECURITY DEFINER function besides the documented lookups"
    outsider = world.conn("outsider")
    before = snapshot(conn)
    for sig in sorted(triggers):
        _, oid = found[sig]
        assert not conn.execute(
            "SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (world.role("outsider"), oid)
        ).fetchone()[0], f"{sig} is executable by PUBLIC"
        assert _outcome(outsider, f"SELECT {sig.split('(')[0]}()", ()) == ("error", "42501")
    wrong = []
    for sig, (sql, params, want) in sorted(calls.items()):
        got = _outcome(outsider, sql, params)
        if got != want:
            wrong.append(f"{sig}: got {got}, expected {want}")
    assert not wrong, "\n".join(wrong)
    assert _outcome(outsider, "SELECT * FROM kb._llm_cache_get(%s)", ([KNOWN_KEY],)) == (
        "rows",
        [(KNOWN_KEY, "the answer")],
    )
    assert _outcome(outsider, "SELECT count(*) FROM kb.llm_call", ()) == ("error", "42501")
    assert snapshot(conn) == before


def test_the_old_index_drop_is_gone(world: World, conn: psycopg.Connection[Any]) -> None:
    """kb._hnsw_index(kb_id, index_id, false) dropped any generation's HNSW index for any
    role when the pair matched no row."""
    index = f"embedding_hnsw_{world.index_id}"
    got = _outcome(
        world.conn("outsider"), "SELECT kb._hnsw_index(999999, %s, false)", (world.index_id,)
    )
    assert got == ("error", "42883")  # undefined_function
    assert conn.execute("SELECT to_regclass(%s)", (f"kb.{index}",)).fetchone()[0] is not None
    plan = (
        world.conn("member")
        .execute("EXPLAIN SELECT * FROM kb.search(%s, 'alpha', method => 'vector')", (world.kb,))
        .fetchall()
    )
    assert plan  # the KB still searches; its index is kb.embedding's partial index
    assert _outcome(
        world.conn("member"), "SELECT count(*) FROM kb.search(%s, 'alpha')", (world.kb,)
    ) == ("rows", [(2,)])


def test_a_raw_kb_delete_takes_its_vector_index(
    world: World, conn: psycopg.Connection[Any]
) -> None:
    admin = world.conn("admin")
    admin.execute(
        "SELECT kb.create_knowledge_base(%s, team => %s)",
        (f"{world.prefix}_other", f"{world.prefix}_A"),
    )
    other_ix = conn.execute(
        "SELECT active_index_id FROM kb.knowledge_base WHERE name = %s", (f"{world.prefix}_other",)
    ).fetchone()[0]
    assert (
        admin.execute("DELETE FROM kb.knowledge_base WHERE id = %s", (world.kb_id,)).rowcount == 1
    )
    exists = "SELECT to_regclass(%s) IS NOT NULL"
    assert not conn.execute(exists, (f"kb.embedding_hnsw_{world.index_id}",)).fetchone()[0]
    assert conn.execute(exists, (f"kb.embedding_hnsw_{other_ix}",)).fetchone()[0]
    for t in ("chunk", "embedding", "posting", "term_stat", "kb_index", "document"):
        assert conn.execute(
            f"SELECT count(*) FROM kb.{t} WHERE kb_id = %s", (world.kb_id,)
        ).fetchone() == (0,), t


def test_what_kbpg_builds_is_not_written_by_raw_sql(
    world: World, conn: psycopg.Connection[Any]
) -> None:
    member = world.conn("member")
    before = snapshot(conn)
    attempts = [
        (
            "INSERT INTO kb.chunk (index_id, kb_id, document_id, ordinal, content, token_count, "
            "char_start, char_end, tsv, doc_len) SELECT %s, kb_id, id, 99, 'planted', 1, 0, 7, "
            "'planted'::tsvector, 1 FROM kb.document WHERE kb_id = %s",
            (world.index_id, world.kb_id),
        ),
        ("DELETE FROM kb.chunk WHERE kb_id = %s", (world.kb_id,)),
        ("DELETE FROM kb.embedding WHERE kb_id = %s", (world.kb_id,)),
        ("UPDATE kb.term_stat SET df = 1000 WHERE kb_id = %s", (world.kb_id,)),
        (
            "INSERT INTO kb.posting (index_id, lexeme, chunk_id, kb_id, tf, dl) "
            "SELECT index_id, 'planted', id, kb_id, 1, 1 FROM kb.chunk WHERE kb_id = %s",
            (world.kb_id,),
        ),
        ("DELETE FROM kb.graph_node WHERE kb_id = %s", (world.kb_id,)),
        ("TRUNCATE kb.page_index_node", ()),
        ("UPDATE kb.kb_index SET n_chunks = 1 WHERE kb_id = %s", (world.kb_id,)),
        ("UPDATE kb.kb_index SET status = 'failed' WHERE kb_id = %s", (world.kb_id,)),
    ]
    for sql, params in attempts:
        assert _outcome(member, sql, params) == ("error", "42501"), sql
    assert snapshot(conn) == before


def test_no_session_setting_bypasses_a_guard(world: World, conn: psycopg.Connection[Any]) -> None:
    member = world.conn("member")
    before = snapshot(conn)
    member.execute("SET kb.internal_write = on")
    member.execute("SELECT set_config('kb.bulk_drop', %s, false)", (str(world.index_id),))
    refused = [
        "UPDATE kb.knowledge_base SET embedding_dim = 8 WHERE id = %(kb)s",
        "UPDATE kb.knowledge_base SET indexing_config = indexing_config || "
        "'{\"chunk_size\": 50}' WHERE id = %(kb)s",
        "UPDATE kb.knowledge_base SET embedding_model = 'x/y' WHERE id = %(kb)s",
        "UPDATE kb.kb_index SET embedding_dim = 8 WHERE id = %(ix)s",
        "UPDATE kb.kb_index SET indexing_config = '{}' WHERE id = %(ix)s",
        # A generation of its own, with a config no validation saw, is refused too.
        "INSERT INTO kb.kb_index (kb_id, indexing_config, embedding_model, embedding_dim) "
        'VALUES (%(kb)s, \'{"strategy": "chunk_embed", "chunk_size": 999999}\', '
        "'local/all-MiniLM-L6-v2', 384)",
        "INSERT INTO kb.kb_index (kb_id, indexing_config, embedding_model, embedding_dim, status) "
        "SELECT kb_id, indexing_config, embedding_model, embedding_dim, 'active' "
        "FROM kb.kb_index WHERE id = %(ix)s",
    ]
    for sql in refused:
        got = _outcome(member, sql, {"kb": world.kb_id, "ix": world.index_id})  # type: ignore[arg-type]
        assert got == ("error", "22023"), sql
    assert snapshot(conn) == before
    # Upkeep is not a setting either: a delete under kb.bulk_drop keeps BM25 exact.
    member.execute("SELECT kb.delete_document(%s, 'beta')", (world.kb,))
    assert_statistics_exact(conn, world.index_id)
    hits = member.execute(
        "SELECT title FROM kb.search(%s, 'electrons aluminium', method => 'full_text', "
        "term_expansion => 0)",
        (world.kb,),
    ).fetchall()
    assert hits == []


def assert_statistics_exact(conn: psycopg.Connection[Any], index_id: int) -> None:
    """kb.posting, kb.term_stat and the generation's totals, recomputed from its chunks."""
    n, total = conn.execute(
        "SELECT n_chunks, total_len FROM kb.kb_index WHERE id = %s", (index_id,)
    ).fetchone()
    assert (n, total) == conn.execute(
        "SELECT count(*), coalesce(sum(doc_len), 0) FROM kb.chunk WHERE index_id = %s", (index_id,)
    ).fetchone()
    df = "SELECT lexeme, df FROM kb.term_stat WHERE index_id = %s ORDER BY 1"
    recomputed = (
        "SELECT u.lexeme, count(*) FROM kb.chunk c, unnest(c.tsv) u "
        "WHERE c.index_id = %s GROUP BY 1 ORDER BY 1"
    )
    assert (
        conn.execute(df, (index_id,)).fetchall() == conn.execute(recomputed, (index_id,)).fetchall()
    )
    postings = "SELECT count(*) FROM kb.posting WHERE index_id = %s"
    pairs = "SELECT count(*) FROM kb.chunk c, unnest(c.tsv) u WHERE c.index_id = %s"
    assert (
        conn.execute(postings, (index_id,)).fetchone()
        == conn.execute(pairs, (index_id,)).fetchone()
    )


def test_a_members_bm25_look_up_works_out_the_query_once(
    world: World, conn: psycopg.Connection[Any]
) -> None:
    """Under row-level security a filter on term_stat runs after the policy's, once per row
    of the generation: the in-memory scorer's look-up of the query's terms takes their
    lexemes as a value, worked out once, never as a call in that filter (a member's search
    took 2.5 s on a KB of 22k terms)."""
    from kbpg_db import bm25

    member = world.conn("member")
    member.execute(f"PREPARE kb_terms (bigint, integer, text, text[]) AS {bm25.TERMS}")
    (plan,) = member.execute(
        f"EXPLAIN (FORMAT JSON) EXECUTE kb_terms({int(world.index_id)}, {int(world.kb_id)}, "
        "'alpha electrons', '{}')"
    ).fetchone()
    nodes, todo = [], [plan[0]["Plan"]]
    while todo:
        node = todo.pop()
        nodes.append(node)
        todo.extend(node.get("Plans", []))
    on_terms = [n for n in nodes if n.get("Relation Name") in ("term_stat", None)]
    conditions = [
        str(n.get(k, "")) for n in on_terms for k in ("Filter", "Index Cond", "Recheck Cond")
    ]
    assert any("term_stat" == n.get("Relation Name") for n in nodes)
    assert not [c for c in conditions if "_config_lexemes" in c], conditions
    member.execute("DEALLOCATE kb_terms")


def test_off_boarding_typos_are_errors(world: World, conn: psycopg.Connection[Any]) -> None:
    admin, team = world.conn("admin"), f"{world.prefix}_A"
    with pytest.raises(psycopg.errors.UndefinedObject, match='role "nobody_here" does not exist'):
        admin.execute("SELECT kb.remove_team_member(%s, 'nobody_here')", (team,))
    with pytest.raises(psycopg.errors.NoDataFound, match="is not a member of team") as info:
        admin.execute("SELECT kb.remove_team_member(%s, %s)", (team, world.role("outsider")))
    assert info.value.diag.message_hint == "check the role's name: nothing was removed"
    members = "SELECT count(*) FROM kb.team_member WHERE team_id = %s"
    assert conn.execute(members, (world.team_id,)).fetchone() == (2,)
    assert admin.execute(
        "SELECT kb.remove_team_member(%s, %s)", (team, world.role("member"))
    ).fetchone() == (True,)
    assert conn.execute(members, (world.team_id,)).fetchone() == (1,)


def test_a_session_open_across_an_upgrade_is_told_to_reconnect(
    cluster: Cluster, dsn: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each release's PL/Python package has its own folder, and a session that loaded one
    release never runs another's SQL with it."""
    new = "9.9.9"
    stale = psycopg.connect(dsn, autocommit=True)
    try:
        assert stale.execute("SELECT kb.count_tokens('hello world')").fetchone()[0] > 0
        # The new release's package, installed beside the running one (as `make setup` does).
        source = cluster.plpython_dir / "releases" / __version__ / "kbpg_db"
        target = cluster.plpython_dir / "releases" / new / "kbpg_db"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        init = target / "__init__.py"
        init.write_text(init.read_text().replace(f'"{__version__}"', f'"{new}"'))
        for path in [target.parent, target, *target.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        # ... and its SQL (`kbpg install` of the new release).
        monkeypatch.setattr(sqlgen, "__version__", new)
        monkeypatch.setattr(kbpg.migrate, "__version__", new)
        sqlgen.macros.cache_clear()
        try:
            migrate(conn)
        finally:
            sqlgen.macros.cache_clear()
        with pytest.raises(psycopg.Error) as info:
            stale.execute("SELECT kb.count_tokens('hello world')")
        diag = info.value.diag
        assert diag.sqlstate == "KB003"
        assert diag.message_primary == (
            f"kbpg was upgraded to {new} while this session had {__version__} loaded"
        )
        assert diag.message_hint == "start a new session (reconnect): it loads the new release"
        assert f"releases/{__version__}/kbpg_db" in (diag.message_detail or "")
        with psycopg.connect(dsn, autocommit=True) as fresh:
            assert fresh.execute("SELECT kb.count_tokens('hello world')").fetchone()[0] > 0
            (loaded,) = fresh.execute("SELECT version FROM kb.version").fetchone()
            assert loaded == new
    finally:
        stale.close()
        shutil.rmtree(cluster.plpython_dir / "releases" / new, ignore_errors=True)
