"""kbpg as a user who runs PostgreSQL already gets it: the wheel built from this tree,
installed into a fresh virtual environment outside the repository (the client alone,
none of the server's packages), `kbpg server-setup` on the database host, `kbpg install`
into a second PostgreSQL started here by hand (not kbpg's embedded cluster, and no kbpg
setting in its configuration), then files indexed and searched through that install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbpg.cluster import SERVER_USER, find_bindir, free_port, is_root
from kbpg.resources import CHECKOUT, lock_file

# What a client-only install must not pull in: the in-database model, LLM and parsing stack.
SERVER_ONLY = (
    "numpy",
    "litellm",
    "onnxruntime",
    "pymupdf",
    "tree_sitter",
    "tiktoken",
    "markitdown",
    "starlette",
)


def _as_server(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", SERVER_USER, "--", *cmd] if is_root() else cmd


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (
        f"{proc.args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="kbpg-wheel-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def wheel(work: Path) -> Path:
    """The wheel, built from a copy of the tree's tracked and new files (no build output
    lands in the checkout, and nothing ignored travels)."""
    src = work / "src"
    files = _ok(_run(["git", "ls-files", "-co", "--exclude-standard", "-z"], CHECKOUT))
    for name in filter(None, files.split("\0")):
        if (CHECKOUT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(CHECKOUT / name, src / name)
    _ok(
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--wheel-dir",
                str(work / "dist"),
                str(src),
            ],
            src,
        )
    )
    (built,) = (work / "dist").glob("kbpg-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(work: Path, wheel: Path) -> Path:
    """A fresh venv outside the repository with the wheel's client install."""
    env_dir = work / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    _ok(_run([base, "-m", "venv", str(env_dir)], work))
    _ok(
        _run(
            [
                str(env_dir / "bin" / "pip"),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--constraint",
                str(lock_file()),
                str(wheel),
            ],
            work,
        )
    )
    return env_dir


@pytest.fixture(scope="module")
def server(work: Path) -> Iterator[str]:
    """A PostgreSQL of the machine's own, initialised and started by hand: kbpg's settings
    are left at their defaults (kb.python_path unset: /usr/local/lib/kbpg/pythonX.Y)."""
    bindir = find_bindir()
    data, sock = work / "pgdata", work / "pgrun"
    for folder in (data, sock):
        folder.mkdir(mode=0o700)
        if is_root():
            shutil.chown(folder, SERVER_USER)
    _ok(
        _run(
            _as_server(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ]
            ),
            Path("/"),
        )
    )
    port = free_port()
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(
            f"port = {port}\nlisten_addresses = ''\nunix_socket_directories = '{sock}'\n"
            "fsync = off\n"
        )
    # The server inherits a TIKTOKEN_CACHE_DIR its OS user cannot read, as a server started
    # from a clone in a root-only folder did: kbpg must tokenize from its own file, never
    # through tiktoken's cache (a miss there downloads, and this machine has no network).
    private = work / "private"
    private.mkdir(mode=0o700)
    (private / "tiktoken").mkdir()
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(private / "tiktoken")}
    _ok(
        _run(
            _as_server(
                [str(bindir / "pg_ctl"), "start", "-w", "-D", str(data), "-l", str(sock / "pg.log")]
            ),
            Path("/"),
            env,
        )
    )
    try:
        _ok(
            _run(
                [
                    str(bindir / "psql"),
                    "-h",
                    str(sock),
                    "-p",
                    str(port),
                    "-U",
                    "postgres",
                    "-d",
                    "postgres",
                    "-c",
                    "CREATE DATABASE docs",
                ],
                work,
            )
        )
        yield f"host={sock} port={port} dbname=docs user=postgres"
    finally:
        _run(
            _as_server([str(bindir / "pg_ctl"), "stop", "-m", "immediate", "-D", str(data)]),
            Path("/"),
        )


def _kbpg(venv: Path, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PG", "KBPG_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return _run([str(venv / "bin" / "kbpg"), *args], work, env)


def test_wheel_installs_into_another_postgresql(venv: Path, server: str, work: Path) -> None:
    py = str(venv / "bin" / "python")
    # The client install: the CLI and the API, not the server's stack.
    found = _ok(
        _run(
            [
                py,
                "-c",
                "import importlib.util as u, json; print(json.dumps("
                f"[m for m in {SERVER_ONLY!r} if u.find_spec(m)]))",
            ],
            work,
        )
    )
    assert json.loads(found) == []
    where = _ok(
        _run(
            [
                py,
                "-c",
                "import kbpg, kbpg.resources as r; print(kbpg.__file__); "
                "print(r.in_checkout()); print(r.sql_dir())",
            ],
            work,
        )
    ).split()
    assert not where[0].startswith(str(CHECKOUT)) and where[1] == "False"
    assert (Path(where[2]) / "440-search.sql").is_file()

    # As a user that is no superuser, `kbpg install` says so and changes nothing.
    _ok(_run(["psql", server, "-c", "CREATE ROLE plain LOGIN"], work))
    plain = _kbpg(venv, work, "--dsn", server.replace("user=postgres", "user=plain"), "install")
    assert plain.returncode == 2 and "must run as a superuser" in plain.stderr
    schema = _ok(_run(["psql", server, "-Atc", "SELECT to_regnamespace('kb') IS NULL"], work))
    assert schema.strip() == "t"

    if is_root():
        setup = _kbpg(venv, work, "server-setup")
        out = _ok(setup)
        assert "kbpg's in-database package:" in out and "/releases/" in out
    installed = _kbpg(venv, work, "--dsn", server, "install")
    assert "installed kbpg" in _ok(installed), installed.stdout
    assert "PL/Python on the server loads kbpg_db" in installed.stdout
    again = _kbpg(venv, work, "--dsn", server, "install")
    assert "is up to date" in _ok(again) and "migrations applied: none" in again.stdout

    # Index a Markdown file and a PDF (no pymupdf here: the server converts it), search.
    (work / "notes.md").write_text(
        "# Glacier tiers\n\nArchived snapshots move to the glacier tier after 90 days and "
        "take twelve hours to thaw before a restore can start.\n"
    )
    pdf = CHECKOUT / "data" / "sample" / "docs" / "retention-guide.pdf"
    _ok(_kbpg(venv, work, "--dsn", server, "kb", "create", "handbook"))
    ingest = _kbpg(
        venv,
        work,
        "--dsn",
        server,
        "ingest",
        "handbook",
        str(work / "notes.md"),
        str(pdf),
        "--wait",
    )
    assert "2 added" in _ok(ingest), ingest.stdout
    assert "error" not in ingest.stdout
    hits = json.loads(
        _ok(
            _kbpg(
                venv,
                work,
                "--dsn",
                server,
                "search",
                "handbook",
                "how long until an archived snapshot can be restored?",
                "--json",
            )
        )
    )
    assert hits and hits[0]["title"] == "notes.md"
    pdf_hits = json.loads(
        _ok(
            _kbpg(
                venv,
                work,
                "--dsn",
                server,
                "search",
                "handbook",
                "retention",
                "--method",
                "full_text",
                "--json",
            )
        )
    )
    assert any(h["title"] == "retention-guide.pdf" and h["page"] for h in pdf_hits)
