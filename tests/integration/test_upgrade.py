"""Upgrades: `kbpg install` over an older schema, with no hand-written DROP.

What a release no longer defines is dropped by install itself (kbpg.migrate
.drop_stale_functions); an upgraded database must then equal a fresh install, compared
as pg_dump writes the kb schema. The previous release, 0.3.0, is read from git history
(the commit the 0.3.0 tag names), installed with its own code, indexed and searched, and
upgraded to the working tree with a search session open across the upgrade.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import threading
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.janitor import DatabaseJanitor

from kbpg.cluster import Cluster
from kbpg.errors import InstallError
from kbpg.migrate import defined_routines, migrate

REPO = Path(__file__).resolve().parents[2]
# kbpg 0.3.0 (tag 0.3.0): migrations 001-021, PL/Python in releases/<version>/ folders.
RELEASE_0_3_0 = "34f5e42152077dd68b60c593c04c803e0739ea58"


def schema_dump(cluster: Cluster, dsn: str) -> str:
    """The kb schema as pg_dump writes it (every table, column, index, constraint,
    policy, trigger, type, function body and privilege), without its version row."""
    out = subprocess.run(
        [str(cluster.bindir / "pg_dump"), "--schema-only", "--schema=kb", "--dbname", dsn],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # (\restrict lines carry a random key, pg_dump 15.14 and later)
    skip = ("-- Dumped", "\\restrict", "\\unrestrict")
    return "\n".join(line for line in out.splitlines() if not line.startswith(skip))


def assert_same_schema(cluster: Cluster, dsn: str, fresh: str) -> None:
    import difflib

    got, want = schema_dump(cluster, dsn), schema_dump(cluster, fresh)
    diff = "\n".join(
        difflib.unified_diff(want.splitlines(), got.splitlines(), "fresh", "upgraded", lineterm="")
    )
    assert got == want, diff[:6000]


def new_database(cluster: Cluster, name: str, template: str | None = None) -> DatabaseJanitor:
    janitor = DatabaseJanitor(
        user="postgres",
        host=str(cluster.run_dir),
        port=cluster.port,
        dbname=name,
        template_dbname=template,
    )
    janitor.init()
    return janitor


def test_install_drops_what_this_release_does_not_define(
    cluster: Cluster, template_db: str, dsn: str
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """
            -- a function an older release had and this one does not
            CREATE FUNCTION kb.retired_helper(a integer) RETURNS integer
              LANGUAGE sql AS 'SELECT a';
            -- this release's signatures with another result, parameter names, fewer
            -- defaults: CREATE OR REPLACE alone would refuse each
            DROP FUNCTION kb.server_cpu_count();
            CREATE FUNCTION kb.server_cpu_count() RETURNS text LANGUAGE sql AS 'SELECT ''1''';
            DROP FUNCTION kb.validate_config(text, jsonb, text);
            CREATE FUNCTION kb.validate_config(k text, c jsonb, s text)
              RETURNS jsonb LANGUAGE sql AS 'SELECT c';
            """
        )
        applied = migrate(conn)
        assert {a for a in applied if a.startswith("drop ")} == {
            "drop kb.retired_helper(a integer)",
            "drop kb.server_cpu_count()",
            "drop kb.validate_config(k text, c jsonb, s text)",
        }
        assert (
            conn.execute("SELECT to_regprocedure('kb.retired_helper(integer)')").fetchone()[0]
            is None
        )
        assert conn.execute("SELECT kb.server_cpu_count() >= 1").fetchone()[0] is True
        assert conn.execute(
            "SELECT kb.validate_config('retrieval_config', '{}') ->> 'top_k'"
        ).fetchone()[0]
        # nothing left to drop the second time
        assert not [a for a in migrate(conn) if a.startswith("drop ")]
    assert_same_schema(cluster, dsn, cluster.dsn(template_db))


def test_a_retired_function_something_uses_stops_the_install(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION kb.retired_helper(a integer) RETURNS integer "
            "LANGUAGE sql AS 'SELECT a'; "
            "CREATE VIEW kb.uses_retired AS SELECT kb.retired_helper(1) AS one"
        )
        kbs = conn.execute("SELECT count(*) FROM kb.knowledge_base").fetchone()[0]
        with pytest.raises(InstallError) as err:
            migrate(conn)
        assert "kb.retired_helper(a integer) must be dropped" in err.value.message
        assert "no longer defines it" in err.value.message
        assert "view uses_retired depends on" in (err.value.detail or "")
        assert "migration" in (err.value.hint or "")
        # the whole install rolled back: both still there, nothing else touched
        assert conn.execute("SELECT one FROM kb.uses_retired").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM kb.knowledge_base").fetchone()[0] == kbs


def test_routines_are_read_from_the_sql_as_postgres_compares_them() -> None:
    (f, g, p) = defined_routines(
        [
            "CREATE FUNCTION kb.f(a integer, b double precision DEFAULT 1, OUT c text) "
            "RETURNS SETOF record LANGUAGE sql AS 'SELECT 1';"
            'CREATE FUNCTION kb.g(kb.chunk_payload[], "y" vector) '
            "RETURNS TABLE(q bigint, r numeric(3, 1)) LANGUAGE sql AS 'SELECT 1';"
            "CREATE FUNCTION other.h() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN END';"
            "CREATE PROCEDURE kb.p(INOUT a int) LANGUAGE sql AS 'SELECT 1';"
        ]
    )
    assert (f.name, f.args, f.arg_names, f.defaults) == (
        "kb.f",
        ("integer", "double precision"),
        ("a", "b"),
        1,
    )
    assert (f.returns, f.setof, f.columns) == ("record", True, (("c", "text"),))
    assert (g.args, g.arg_names) == (("kb.chunk_payload[]", "vector"), ("", "y"))
    assert g.columns == (("q", "bigint"), ("r", "numeric(3, 1)"))
    assert (p.procedure, p.args, p.columns) == (True, ("integer",), (("a", "integer"),))


# --- the previous release, upgraded ---------------------------------------------------


def _release_tree(commit: str, into: Path) -> Path:
    """The files of a past release, from this clone's git history (skips without it)."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.skip(
            f"kbpg 0.3.0 (commit {commit[:7]}) is read from git history, which this copy of "
            "the repository does not have (a shallow clone or an export)"
        )
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "kbpg", "plpython", "sql", "migrations"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _old(tree: Path, code: str, *args: str) -> str:
    """Run code with the old release's Python packages (its kbpg and kbpg_db)."""
    env = {**os.environ, "PYTHONPATH": f"{tree}:{tree / 'plpython'}"}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _search(conn: Any) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT title, content FROM kb.search('upgrade', 'tea from assam', top_k => 3)"
    ).fetchall()


def test_upgrade_from_0_3_0_with_a_search_open(
    cluster: Cluster, template_db: str, tmp_path: Path
) -> None:
    from kbpg_db import __version__

    tree = _release_tree(RELEASE_0_3_0, tmp_path / "kbpg-0.3.0")
    old_version = _old(tree, "import kbpg_db; print(kbpg_db.__version__)").strip()
    assert old_version == "0.3.0" != __version__
    cluster.install_release(tree / "plpython" / "kbpg_db", old_version)
    name = f"kbpg_upgrade_{os.getpid()}"
    janitor = new_database(cluster, name)
    dsn = cluster.dsn(name)
    try:
        # 0.3.0 installs its schema, a KB is filled and indexed by 0.3.0's worker
        _old(
            tree,
            "import sys, psycopg; from kbpg.migrate import migrate\n"
            "with psycopg.connect(sys.argv[1], autocommit=True) as c: migrate(c)",
            dsn,
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT version FROM kb.version").fetchone()[0] == "0.3.0"
            conn.execute("SELECT kb.create_knowledge_base('upgrade')")
            for title, text in [
                ("tea", "# Tea\n\nAssam tea grows in the valley of the Brahmaputra."),
                ("coffee", "# Coffee\n\nArabica coffee grows on the slopes of Ethiopia."),
                ("rice", "# Rice\n\nRice paddies flood in the monsoon season."),
            ]:
                conn.execute("SELECT kb.add_document('upgrade', %s, %s)", (title, text))
        _old(
            tree,
            "import sys; from kbpg.cli import main; sys.exit(main(sys.argv[1:]))",
            "--dsn",
            dsn,
            "worker",
            "--once",
        )
        with psycopg.connect(dsn, autocommit=True) as searching:
            before = _search(searching)
            assert before[0][0] == "tea"
            # A search session mid-transaction while the upgrade starts: install waits
            # for it (never cancels it), then upgrades.
            searching.execute("BEGIN")
            assert _search(searching)[0][0] == "tea"
            applied: list[str] = []
            errors: list[BaseException] = []

            def upgrade() -> None:
                try:
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        applied.extend(migrate(conn))
                except BaseException as exc:
                    errors.append(exc)

            worker = threading.Thread(target=upgrade)
            worker.start()
            time.sleep(2)
            assert worker.is_alive(), "the upgrade did not wait for the open search"
            assert _search(searching)[0][0] == "tea"
            searching.execute("COMMIT")
            worker.join(300)
            assert not errors, errors[0]
            assert "031-chunk-origin-and-document-regions.sql" in applied
            # The session had 0.3.0's Python loaded: a clear error, never a mix.
            with pytest.raises(psycopg.Error) as err:
                _search(searching)
            assert err.value.sqlstate == "KB003"
            assert "start a new session" in (err.value.diag.message_hint or "")
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT version FROM kb.version").fetchone()[0] == __version__
            # what 0.3.0 indexed serves as it did
            assert _search(conn) == before
            conn.execute(
                "SELECT kb.add_document('upgrade', 'tea', "
                "'# Tea\n\nDarjeeling tea grows in the hills; Assam tea in the valley.')"
            )
        from tests.helpers import run_worker

        run_worker(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert "Darjeeling" in _search(conn)[0][1]
            # a KB dropped takes its generations' HNSW indexes with it
            conn.execute("SELECT kb.drop_knowledge_base('upgrade')")
        # the upgraded schema is the fresh install's, object for object
        assert_same_schema(cluster, dsn, cluster.dsn(template_db))
    finally:
        janitor.drop()
