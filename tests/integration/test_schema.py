"""The schema: SQL files parse, migrations are immutable, fresh == step-by-step."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pglast
import psycopg
import pytest
from kbpg_db import sqlgen
from pytest_postgresql.janitor import DatabaseJanitor

from kbpg.cluster import Cluster
from kbpg.errors import KbpgError
from kbpg.migrate import Script, migrate, scripts
from kbpg.resources import migrations_dir, sql_dir

ALL_SQL = sorted([*sql_dir().glob("*.sql"), *migrations_dir().glob("*.sql")])


@pytest.mark.parametrize("path", ALL_SQL, ids=lambda p: p.name)
def test_sql_files_parse(path: Path) -> None:
    statements = pglast.parse_sql(path.read_text())
    assert statements, f"{path.name} holds no statement"
    # ... and as kbpg install installs them, with the generated parts filled in.
    assert len(pglast.parse_sql(sqlgen.expand(path.read_text()))) == len(statements)


def test_search_parameters_come_from_the_retrieval_model(conn: psycopg.Connection) -> None:
    from kbpg_db.config import RetrievalConfig

    for function in ("search", "explain_search"):
        args = conn.execute(
            "SELECT proargnames[3:pronargs] FROM pg_proc "
            "WHERE proname = %s AND pronamespace = 'kb'::regnamespace",
            (function,),
        ).fetchone()[0]
        assert args == list(sqlgen.search_options())
        fields = [sqlgen.SQL_NAMES.get(f, f) for f in RetrievalConfig.model_fields]
        assert args[:-1] == fields and args[-1] == "options"


def test_sql_files_are_idempotent_definitions() -> None:
    for path in sql_dir().glob("*.sql"):
        for stmt in pglast.parse_sql(path.read_text()):
            node = stmt.stmt
            kind = type(node).__name__
            if kind == "CreateFunctionStmt":
                assert node.replace, f"{path.name}: CREATE FUNCTION without OR REPLACE"
            assert kind not in ("CreateStmt", "AlterTableStmt"), (
                f"{path.name}: table DDL belongs in migrations/"
            )


def _dump(cluster: Cluster, db: str) -> str:
    out = subprocess.run(
        [
            str(cluster.bindir / "pg_dump"),
            "--schema-only",
            "--schema=kb",
            "--no-owner",
            "-h",
            str(cluster.run_dir),
            "-p",
            str(cluster.port),
            "-U",
            "postgres",
            db,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "\n".join(
        line
        for line in out.splitlines()
        if not line.startswith(("--", "\\restrict", "\\unrestrict"))
    )


def _new_db(cluster: Cluster, name: str) -> DatabaseJanitor:
    janitor = DatabaseJanitor(
        user="postgres", host=str(cluster.run_dir), port=cluster.port, dbname=name
    )
    janitor.init()
    return janitor


def test_fresh_install_equals_step_by_step(cluster: Cluster) -> None:
    fresh, steps = _new_db(cluster, "schema_fresh"), _new_db(cluster, "schema_steps")
    try:
        with psycopg.connect(cluster.dsn("schema_fresh"), autocommit=True) as conn:
            migrate(conn)
        with psycopg.connect(cluster.dsn("schema_steps"), autocommit=True) as conn:
            # Each migration in turn; the sql/ files of this tree pair with its last one.
            for script in scripts(migrations_dir()):
                applied = migrate(conn, upto=script.name, with_sql=False)
                assert script.name in applied
            names = {m.name for m in scripts(migrations_dir())}
            assert not names & set(migrate(conn))  # nothing left to run twice
        assert _dump(cluster, "schema_fresh") == _dump(cluster, "schema_steps")
    finally:
        fresh.drop()
        steps.drop()


def test_changed_migration_is_an_error(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert not {m.name for m in scripts(migrations_dir())} & set(migrate(conn))
        changed = [Script(s.name, s.body + "\n-- edited") for s in scripts(migrations_dir())]
        with pytest.raises(KbpgError, match=f"migration {changed[0].name} was changed"):
            migrate(conn, migrations=changed)
        recorded = conn.execute("SELECT count(*) FROM kb.migration").fetchone()[0]
        assert recorded == len(changed)


def test_functions_pin_search_path_and_are_documented(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT p.proname, p.proconfig, obj_description(p.oid, 'pg_proc') "
        "FROM pg_proc p WHERE p.pronamespace = 'kb'::regnamespace"
    ).fetchall()
    assert len(rows) > 30
    for name, config, comment in rows:
        assert config and any(c.startswith("search_path=kb") for c in config), name
        if not name.startswith("_"):
            assert comment, f"kb.{name} has no COMMENT"


def test_migrate_on_a_live_database_never_breaks_searches(dsn: str) -> None:
    import threading

    from kbpg.client import Client
    from tests.fakeprovider import FakeProvider
    from tests.helpers import remote_kb, run_worker

    errors: list[BaseException] = []
    stop = threading.Event()
    with FakeProvider() as provider, Client(dsn) as client:
        with psycopg.connect(dsn, autocommit=True) as admin:
            remote_kb(client, admin, provider, "live")
        for i in range(20):
            client.add_text("live", f"d{i}", f"document {i} about cats and tea")
        run_worker(dsn)

        def searcher() -> None:
            with Client(dsn) as c:
                while not stop.is_set():
                    try:
                        assert c.search("live", "cats tea", method="full_text", top_k=5)
                        c.document_status("live")
                    except BaseException as exc:
                        errors.append(exc)
                        return

        threads = [threading.Thread(target=searcher) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for _ in range(5):
                    migrate(conn)
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert not errors, errors[0]


def test_migrate_takes_its_locks_before_any_work(dsn: str) -> None:
    """A pending migration whose table is busy fails its try at the lock, before any of
    its statements run (a notice it raises first never arrives), and runs once free."""
    body = (
        "DO $$ BEGIN RAISE NOTICE 'migration work started'; END $$;\n"
        "ALTER TABLE kb.job ADD COLUMN lock_probe integer;\n"
        "ALTER TABLE kb.job DROP COLUMN lock_probe;\n"
    )
    extra = [*scripts(migrations_dir()), Script("999-lock-probe.sql", body)]
    notices: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as busy:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        busy.execute("SELECT count(*) FROM kb.job")  # holds ACCESS SHARE until rollback
        with pytest.raises(psycopg.errors.LockNotAvailable):
            migrate(conn, migrations=extra, attempts=2)
        assert "migration work started" not in notices
        assert not conn.execute(
            "SELECT 1 FROM kb.migration WHERE name = '999-lock-probe.sql'"
        ).fetchone()
        busy.rollback()
        assert "999-lock-probe.sql" in migrate(conn, migrations=extra)
        assert "migration work started" in notices
        conn.execute("DELETE FROM kb.migration WHERE name = '999-lock-probe.sql'")


def test_lock_plan_names_what_each_statement_changes() -> None:
    from kbpg.migrate import tables_to_lock

    plan = tables_to_lock(
        "CREATE TABLE kb.new_t (id bigint REFERENCES kb.document (id));\n"
        "CREATE INDEX ON kb.chunk (ordinal);\n"
        "UPDATE kb.job SET attempts = 0;\n"
        "CREATE INDEX ON kb.job (attempts);\n"
        "CREATE OR REPLACE VIEW kb.v AS SELECT * FROM kb.posting;\n"
        "SELECT * FROM kb.term_stat;\n"
        "DO $$ BEGIN EXECUTE 'ALTER TABLE kb.embedding ADD COLUMN x int'; END $$;\n"
    )
    assert plan == {
        "kb.document": "SHARE ROW EXCLUSIVE",  # a new foreign key's target
        "kb.chunk": "SHARE",
        "kb.job": "SHARE ROW EXCLUSIVE",  # rows changed (ROW EXCLUSIVE) and indexed (SHARE)
        "kb.v": "ACCESS EXCLUSIVE",
    }


# Tables that hold no knowledge base's rows: replicated whole under Citus (README, "Beyond
# one machine"). Every other table is per-KB and must pass the checks below.
REFERENCE_TABLES = {
    "knowledge_base",
    "kb_share",
    "team",
    "team_member",
    "setting",
    "llm_call",
    "common_word",
    "migration",
    "version",
}


def test_every_per_kb_table_is_keyed_by_kb_id(conn: psycopg.Connection) -> None:
    """The invariant that lets each per-KB table be distributed by kb_id and co-located:
    kb_id is a NOT NULL column, in the primary key, in every unique index, and on both
    sides of every foreign key between per-KB tables."""
    tables = {
        name: has_kb_id
        for name, has_kb_id in conn.execute(
            "SELECT c.relname, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
            "AND a.attname = 'kb_id' AND a.attnotnull AND NOT a.attisdropped) "
            "FROM pg_class c WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind IN ('r', 'p')"
        )
    }
    per_kb = set(tables) - REFERENCE_TABLES
    assert REFERENCE_TABLES <= set(tables)
    assert {"chunk", "embedding", "posting", "term_stat", "graph_node", "page_index_node"} <= per_kb
    assert [t for t in sorted(per_kb) if not tables[t]] == [], "per-KB tables without kb_id"
    # Primary keys and unique indexes (constraints and plain unique indexes alike).
    unique = conn.execute(
        "SELECT c.relname, i.indexrelid::regclass::text, i.indisprimary, "
        "ARRAY(SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.oid "
        "      AND a.attnum = ANY (i.indkey::int2[])) "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
        "WHERE c.relnamespace = 'kb'::regnamespace AND i.indisunique"
    ).fetchall()
    with_pk = {t for t, _, primary, _ in unique if primary}
    assert sorted(per_kb - with_pk) == [], "per-KB tables without a primary key"
    bad = [(t, ix) for t, ix, _, cols in unique if t in per_kb and "kb_id" not in cols]
    assert bad == [], f"unique keys without kb_id: {bad}"
    # Foreign keys: between per-KB tables, kb_id pairs with kb_id.
    fks = conn.execute(
        "SELECT f.conname, c.relname, r.relname, "
        "ARRAY(SELECT a.attname FROM unnest(f.conkey) WITH ORDINALITY k(n, o) "
        "      JOIN pg_attribute a ON a.attrelid = f.conrelid AND a.attnum = k.n ORDER BY k.o), "
        "ARRAY(SELECT a.attname FROM unnest(f.confkey) WITH ORDINALITY k(n, o) "
        "      JOIN pg_attribute a ON a.attrelid = f.confrelid AND a.attnum = k.n ORDER BY k.o) "
        "FROM pg_constraint f JOIN pg_class c ON c.oid = f.conrelid "
        "JOIN pg_class r ON r.oid = f.confrelid "
        "WHERE f.contype = 'f' AND f.connamespace = 'kb'::regnamespace"
    ).fetchall()
    checked = 0
    for name, child, parent, cols, ref_cols in fks:
        if child in per_kb and parent in per_kb:
            pairs = dict(zip(cols, ref_cols, strict=True))
            assert pairs.get("kb_id") == "kb_id", f"{child}.{name} does not pair kb_id"
            checked += 1
        # A reference table may point at a per-KB one only where the README's Citus steps
        # drop the key first (the active generation of a KB).
        if child in REFERENCE_TABLES and parent in per_kb:
            assert name == "knowledge_base_active_index_fk", name
    assert checked >= 30


def test_readme_distributes_exactly_the_per_kb_tables(conn: psycopg.Connection) -> None:
    import re

    readme = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    distributed = set(re.findall(r"create_distributed_table\('kb\.(\w+)', 'kb_id'", readme))
    reference = set(re.findall(r"create_reference_table\('kb\.(\w+)'\)", readme))
    tables = {
        r[0]
        for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'kb'::regnamespace "
            "AND relkind IN ('r', 'p')"
        )
    }
    assert reference == REFERENCE_TABLES
    assert distributed == tables - REFERENCE_TABLES
    assert "DROP CONSTRAINT knowledge_base_active_index_fk" in readme


def test_every_generation_table_is_declared_by_one_feature(conn: psycopg.Connection) -> None:
    """kb._clear_index, the write lock-down and the row-level security of what a
    generation builds are generated from config.FEATURES: a table that holds a
    generation's rows and no feature declares would escape all three."""
    from kbpg_db import config

    declared = sqlgen.index_tables()
    assert len(declared) == len(set(declared)), "a table declared twice"
    built = {
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
            "WHERE c.relnamespace = 'kb'::regnamespace AND c.relkind = 'r' "
            "AND a.attname = 'index_id' AND NOT a.attisdropped"
        )
    }
    # A job names the generation it builds; it is the queue, not part of the index.
    assert built - {"job"} == set(declared)
    assert set(config.SEARCH_TABLES) <= set(declared)
    clear = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = '_clear_index'").fetchone()[0]
    for table in declared:
        assert f"DELETE FROM kb.{table} WHERE" in clear, table


def test_generation_tables_are_readable_as_their_index_and_written_by_kbpg_only(
    conn: psycopg.Connection,
) -> None:
    rows = conn.execute(
        "SELECT c.relname, c.relrowsecurity, "
        "array_agg(p.polcmd::text ORDER BY p.polcmd) FILTER (WHERE p.polname IS NOT NULL), "
        "has_table_privilege('public', c.oid, 'SELECT'), "
        "has_table_privilege('public', c.oid, 'INSERT'), "
        "has_table_privilege('public', c.oid, 'DELETE') "
        "FROM pg_class c LEFT JOIN pg_policy p ON p.polrelid = c.oid "
        "WHERE c.relnamespace = 'kb'::regnamespace AND c.relname = ANY (%s) "
        "GROUP BY c.oid, c.relname, c.relrowsecurity",
        (list(sqlgen.index_tables()),),
    ).fetchall()
    assert len(rows) == len(sqlgen.index_tables())
    for name, rls, commands, select, insert, delete in rows:
        assert rls, f"{name}: row-level security is off"
        assert sorted(commands) == ["a", "d", "r", "w"], f"{name}: policies {commands}"
        assert (select, insert, delete) == (True, False, False), name


def test_job_outcomes_match_the_worker(conn: psycopg.Connection) -> None:
    from kbpg.worker import Outcome

    values = conn.execute("SELECT enum_range(NULL::kb.job_outcome)::text[]").fetchone()[0]
    assert values == [o.value for o in Outcome]


def test_code_graph_vocabularies_match_their_sql(conn: psycopg.Connection) -> None:
    from kbpg_db import code_graph

    for kind, targets in code_graph.TARGET_KINDS.items():
        got = conn.execute("SELECT kb._graph_target_kinds(%s)", (kind,)).fetchone()[0]
        assert tuple(got) == targets, kind
    for language in code_graph.LANGUAGES:
        family = conn.execute("SELECT kb._language_family(%s)", (language,)).fetchone()[0]
        assert family == code_graph.LANGUAGE_FAMILIES.get(language, language), language


def test_each_strategy_search_step_it_declares_is_defined(conn: psycopg.Connection) -> None:
    """kb._search_core calls a strategy's own search and its step after search by the
    strategy's declaration (the dispatch is generated): each declared step exists with the
    signature the dispatch calls, and no undeclared one is left out of it."""
    from kbpg_db import config

    steps = {f"_search_{f.name}(kb.search_plan,text)": f.own_search for f in config.FEATURES} | {
        f"_after_search_{f.name}(kb.search_plan,kb.search_stage[])": f.after_search
        for f in config.FEATURES
    }
    for signature, declared in steps.items():
        found = conn.execute("SELECT to_regprocedure(%s)", (f"kb.{signature}",)).fetchone()[0]
        assert (found is not None) == declared, signature
    core = sqlgen.expand(
        (Path(__file__).resolve().parents[2] / "sql" / "440-search.sql").read_text()
    )
    assert "kb._search_page_index(v_plan, p_query)" in core
    assert "kb._after_search_graph_index(v_plan, v_rows)" in core
