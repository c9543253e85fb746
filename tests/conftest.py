"""Test harness: one real PostgreSQL (pgvector + plpython3u) for the session.

The server runs as the ``postgres`` OS user when the tests run as root. The schema is
built once into a template database; every test gets a fresh copy of it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql.janitor import DatabaseJanitor

from kbpg.client import Client
from kbpg.cluster import Cluster
from kbpg.migrate import migrate
from tests.fakeprovider import FakeProvider

TEMPLATE = "kbpg_template"
# Test modules whose subject is an LLM feature (a scripted OpenAI-compatible server, or the
# local GGUF smoke test): marked `llm`, so `make test-fast` can leave them out.
LLM_MODULES = {"test_llm", "test_llm_local", "test_doc2json", "test_tree_search", "test_triplets"}
SLOW_MODULES = {"test_wheel", "test_bench_code", "test_research"}
_counter = itertools.count()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    home = Path(tempfile.mkdtemp(prefix="kbpg-test-", dir="/tmp"))
    home.chmod(0o755)
    c = Cluster(
        home,
        settings={
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
            "kb.retry_base_seconds": "'0.1'",
            "kb.onnx_threads": "'1'",
        },
    )
    c.start()
    yield c
    c.stop("immediate")
    shutil.rmtree(home, ignore_errors=True)


def _janitor(cluster: Cluster, dbname: str, template: str | None = None) -> DatabaseJanitor:
    return DatabaseJanitor(
        user="postgres",
        host=str(cluster.run_dir),
        port=cluster.port,
        dbname=dbname,
        template_dbname=template,
    )


@pytest.fixture(scope="session")
def template_db(cluster: Cluster) -> str:
    janitor = _janitor(cluster, TEMPLATE)
    janitor.init()
    with psycopg.connect(cluster.dsn(TEMPLATE), autocommit=True) as conn:
        migrate(conn)
    return TEMPLATE


@pytest.fixture
def dsn(cluster: Cluster, template_db: str) -> Iterator[str]:
    name = f"kbpg_test_{os.getpid()}_{next(_counter)}"
    janitor = _janitor(cluster, name, template_db)
    janitor.init()
    yield cluster.dsn(name)
    janitor.drop()


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@pytest.fixture
def client(dsn: str) -> Iterator[Client]:
    with Client(dsn) as c:
        yield c


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider(dim=16) as p:
        yield p


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The markers of pyproject.toml: llm and slow by module, browser by fixture."""
    for item in items:
        module = getattr(getattr(item, "module", None), "__name__", "").rsplit(".", 1)[-1]
        if module in LLM_MODULES:
            item.add_marker(pytest.mark.llm)
        if module in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
