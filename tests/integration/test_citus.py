"""kbpg on a Citus cluster: a coordinator and two workers on this machine.

Citus is not packaged for Debian's PostgreSQL 15; kbpg/system/setup-citus.sh builds it
from its source tarball (.ci/run does where the tarball is at hand). Where Citus is not
installed these tests skip and say so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from kbpg.client import Client
from kbpg.cluster import Cluster, find_bindir
from kbpg.migrate import migrate
from tests.helpers import run_worker

pytestmark = pytest.mark.citus

DB = "kbpg_citus"


def _citus_installed() -> bool:
    libdir = subprocess.run(
        [str(find_bindir() / "pg_config"), "--pkglibdir"], capture_output=True, text=True
    ).stdout.strip()
    return bool(libdir) and os.path.isfile(os.path.join(libdir, "citus.so"))


@dataclass
class Citus:
    coordinator: Cluster
    workers: list[Cluster]

    def dsn(self) -> str:
        return self.coordinator.dsn(DB)


@pytest.fixture(scope="module")
def citus() -> Iterator[Citus]:
    if not _citus_installed():
        pytest.skip(
            "Citus is not installed for this PostgreSQL: run kbpg/system/setup-citus.sh "
            "with Citus's source tarball (see docs/operations.md)"
        )
    home = Path(tempfile.mkdtemp(prefix="kbpg-citus-", dir="/tmp"))
    home.chmod(0o755)
    settings = {
        "shared_preload_libraries": "'citus'",
        "citus.node_conninfo": "'sslmode=disable'",
        "max_connections": "200",
        "fsync": "off",
        "synchronous_commit": "off",
        "kb.onnx_threads": "'1'",
    }
    nodes = [Cluster(home / name, settings=dict(settings)) for name in ("coord", "w1", "w2")]
    try:
        for node in nodes:
            node.start()
            node.ensure_database(DB)
            with psycopg.connect(node.dsn(DB), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
        with psycopg.connect(nodes[0].dsn(DB), autocommit=True) as conn:
            conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (nodes[0].port,))
            for worker in nodes[1:]:
                conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (worker.port,))
        yield Citus(nodes[0], nodes[1:])
    finally:
        for node in nodes:
            try:
                node.stop("immediate")
            except Exception:
                pass
        if not os.environ.get("KBPG_KEEP"):
            shutil.rmtree(home, ignore_errors=True)


def test_the_cluster_has_a_coordinator_and_two_workers(citus: Citus) -> None:
    with psycopg.connect(citus.dsn(), autocommit=True) as conn:
        nodes = conn.execute(
            "SELECT noderole, nodeport, isactive FROM pg_dist_node ORDER BY groupid"
        ).fetchall()
    ports = [citus.coordinator.port, *(w.port for w in citus.workers)]
    assert [(r[0], r[1], r[2]) for r in nodes] == [("primary", p, True) for p in ports]


def test_kbpg_installs_and_answers_on_the_coordinator(citus: Citus) -> None:
    """Before its tables are distributed, kbpg installs on a Citus coordinator and runs
    there as on one PostgreSQL: a KB, its documents indexed by the worker, a search."""
    with psycopg.connect(citus.dsn(), autocommit=True) as conn:
        migrate(conn)
    with Client(citus.dsn()) as client:
        client.create_knowledge_base("citus-local")
        client.add_text("citus-local", "kettles", "A kettle boils water for tea in three minutes.")
        client.add_text("citus-local", "ports", "A port number picks the socket on a host.")
        run_worker(citus.dsn())
        hits = client.search("citus-local", "boiling water for tea")
        assert hits[0].title == "kettles"
