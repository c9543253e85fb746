"""The local model for queries in one process per server (kbpg_db/embedservice.py): a
searching connection loads neither onnxruntime nor the model, its vectors are the ones the
model gives in the backend, and search goes on where the process is off or killed."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psycopg
import pytest

from bench.connections import service_pids
from kbpg.client import Client
from tests.helpers import run_worker

LOADED = (
    "CREATE OR REPLACE FUNCTION public.kbpg_test_loaded(m text) RETURNS boolean "
    "LANGUAGE plpython3u AS $$ import sys; return m in sys.modules $$"
)


def _query_vector(dsn: str, service: str, text: str) -> tuple[list[float], bool]:
    """kb.embed_query in a new connection; whether that backend loaded onnxruntime."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT set_config('kb.embed_service', %s, false)", (service,))
        vec = c.execute("SELECT kb.embed_query('svc', %s)", (text,)).fetchone()[0]
        loaded = c.execute("SELECT public.kbpg_test_loaded('onnxruntime')").fetchone()[0]
    return vec, loaded


@pytest.fixture
def loaded(conn: psycopg.Connection[Any]) -> Any:
    """public.kbpg_test_loaded(module): whether the calling backend imported it."""
    conn.execute(LOADED)
    yield
    conn.execute("DROP FUNCTION IF EXISTS public.kbpg_test_loaded(text)")


def test_queries_are_embedded_once_per_server(
    client: Client, conn: psycopg.Connection[Any], dsn: str, loaded: None
) -> None:
    data_dir = conn.execute("SELECT current_setting('data_directory')").fetchone()[0]
    client.create_knowledge_base("svc")
    client.add_text("svc", "kettles", "A kettle boils water for tea in three minutes.")
    client.add_text("svc", "ports", "A port number picks the socket on a host.")
    run_worker(dsn)

    served, loaded = _query_vector(dsn, "on", "how long does water take to boil")
    assert not loaded, "a searching backend loaded onnxruntime"
    pids = service_pids(data_dir)
    assert len(pids) == 1
    proc = conn.execute("SELECT kb.embedding_process()").fetchone()[0]
    assert proc["running"] and proc["pid"] == pids[0] and proc["private_mb"] > 50
    assert "serving" in proc["last_log"]
    sock = os.path.join(data_dir, "pg_stat_tmp")
    assert any(n.endswith(".sock") for n in os.listdir(sock))
    # The same vector the model gives in the backend (kb.embed_service = off).
    own, loaded = _query_vector(dsn, "off", "how long does water take to boil")
    assert loaded
    assert max(abs(a - b) for a, b in zip(served, own, strict=True)) < 1e-6
    # Many connections, one process.
    for _ in range(3):
        _query_vector(dsn, "on", "sockets and ports")
    assert service_pids(data_dir) == pids
    with psycopg.connect(dsn, autocommit=True) as c:
        hits = c.execute("SELECT title FROM kb.search('svc', 'boiling water for tea')").fetchall()
        assert hits[0] == ("kettles",)
        assert not c.execute("SELECT public.kbpg_test_loaded('onnxruntime')").fetchone()[0]

    # The process killed: the next connection's search starts another one.
    os.kill(pids[0], signal.SIGKILL)
    # (Its command line goes before its files do: the lock says when it is gone.)
    running = "SELECT kb.embedding_process()->'running'"
    deadline = time.monotonic() + 10
    while conn.execute(running).fetchone()[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not conn.execute(running).fetchone()[0] and not service_pids(data_dir)
    again, loaded = _query_vector(dsn, "on", "how long does water take to boil")
    assert again == served and not loaded
    assert len(service_pids(data_dir)) == 1


def test_the_process_leaves_with_its_postmaster(tmp_path: Any) -> None:
    """Started in a data directory whose postmaster then dies, the process leaves and
    removes its socket; a client that cannot reach it gets None (and embeds itself)."""
    import subprocess
    import sys

    (tmp_path / "pg_stat_tmp").mkdir()
    postmaster = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (tmp_path / "postmaster.pid").write_text(f"{postmaster.pid}\n{tmp_path}\n")
    client = (
        "import os, sys, json; from kbpg_db import embedservice as s; "
        "v = s.embed_queries(['hello world']); "
        "print(json.dumps(None if v is None else len(v[0])))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [sys.executable, "-c", client], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == "384", out.stderr
    socks = list((tmp_path / "pg_stat_tmp").glob("*.sock"))
    assert len(socks) == 1
    postmaster.kill()
    postmaster.wait()
    deadline = time.monotonic() + 15
    while socks[0].exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not socks[0].exists(), (
        (tmp_path / "pg_stat_tmp")
        .joinpath(next(p.name for p in (tmp_path / "pg_stat_tmp").glob("*.log")))
        .read_text()
    )
    # No process, no folder of its own: None at once, without waiting.
    here = os.getcwd()
    os.chdir(tmp_path / "pg_stat_tmp")
    try:
        from kbpg_db import embedservice

        t0 = time.monotonic()
        assert embedservice.embed_queries(["x"]) is None
        assert time.monotonic() - t0 < 1
    finally:
        os.chdir(here)


def test_a_process_that_does_not_answer_is_left_for_the_backends_own_model(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket that takes the query and never answers: after the reply timeout the client
    gives None (the backend embeds itself) and does not ask again for a while."""
    import socket

    from kbpg_db import __version__, embedservice

    (tmp_path / "pg_stat_tmp").mkdir()
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.bind(str(tmp_path / "pg_stat_tmp" / f"kbpg_embed-{__version__}.sock"))
    stuck.listen(8)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(embedservice, "REPLY_TIMEOUT_S", 0.3)
    monkeypatch.setattr(embedservice, "_failed_at", None)
    try:
        t0 = time.monotonic()
        assert embedservice.embed_queries(["hello"]) is None
        assert 0.3 <= time.monotonic() - t0 < 5
        t0 = time.monotonic()
        assert embedservice.embed_queries(["hello"]) is None  # not asked again at once
        assert time.monotonic() - t0 < 0.1
    finally:
        stuck.close()
