"""The kbpg command line, run as a user would: real processes, real cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg

KBPG = [sys.executable, "-m", "kbpg.cli"]


def kbpg(
    *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full = {k: v for k, v in full.items() if v != ""}  # "" means: unset it
    proc = subprocess.run([*KBPG, *args], capture_output=True, text=True, timeout=300, env=full)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"kbpg {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def test_embedded_cluster_up_status_dsn_down() -> None:
    home = Path(tempfile.mkdtemp(prefix="kbpg-cli-", dir="/tmp"))
    home.chmod(0o755)
    env = {"KBPG_HOME": str(home)}
    for var in ("KBPG_DSN", "PGHOST", "PGDATABASE", "PGPORT", "PGUSER"):
        env[var] = ""
    try:
        assert "not created" in kbpg("status", env=env).stdout
        up = kbpg("up", env=env)
        assert "kbpg is up" in up.stdout
        assert "running" in kbpg("status", env=env).stdout
        dsn = kbpg("dsn", env=env).stdout.strip()
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM kb.migration").fetchone()[0] >= 1
            assert (
                conn.execute(
                    "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
                ).fetchone()[0]
                >= "0.8"
            )
        psql = subprocess.run(
            ["psql", dsn, "-Atc", "SELECT count(*) FROM kb.knowledge_base"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert psql.stdout.strip() == "0"
        kbpg("up", env=env)  # idempotent
        assert "stopped" in kbpg("down", env=env).stdout
        assert "stopped" in kbpg("status", env=env, check=False).stdout
    finally:
        kbpg("down", env=env, check=False)
        subprocess.run(["rm", "-rf", str(home)], check=False)


def test_ingest_search_show_status(dsn: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tea.md").write_text("# Tea\n\nGreen tea is brewed at 80 degrees for two minutes.\n")
    (docs / "bread.md").write_text("# Bread\n\nSourdough bread rises with a starter.\n")
    (docs / "broken.md").write_bytes(b"\xff\xfe\x00garbage")
    kbpg("--dsn", dsn, "kb", "create", "cli", "--chunker", "recursive", "--chunk-size", "100")
    proc = kbpg(
        "--dsn", dsn, "ingest", "cli", str(docs), "--category", "food", "--wait", check=False
    )
    assert proc.returncode == 1  # one file failed; the others went in
    assert "added     tea.md" in proc.stdout and "added     bread.md" in proc.stdout
    assert "failed" in proc.stdout and "broken.md" in proc.stdout
    assert "2 added, 0 replaced, 0 unchanged, 1 failed" in proc.stdout
    again = kbpg("--dsn", dsn, "ingest", "cli", str(docs / "tea.md"), "--category", "food")
    assert "unchanged tea.md" in again.stdout
    out = kbpg(
        "--dsn", dsn, "search", "cli", "how hot should green tea water be", "--top-k", "1"
    ).stdout
    assert "1. [1.0000] tea.md" in out and "80 degrees" in out  # recursive: no headings
    js = json.loads(
        kbpg("--dsn", dsn, "search", "cli", "sourdough", "--method", "full_text", "--json").stdout
    )
    assert js[0]["title"] == "bread.md" and js[0]["metadata"]["category"] == "food"
    show = kbpg("--dsn", dsn, "kb", "show", "cli").stdout
    assert "documents: ready 2" in show and "recursive" in show
    status = kbpg("--dsn", dsn, "status").stdout
    assert "cli" in status and "queued" in status
    ctx = kbpg("--dsn", dsn, "context", "cli", "green tea temperature").stdout
    assert "[Source 1: tea.md]" in ctx
    err = kbpg("--dsn", dsn, "search", "nope", "x", check=False)
    assert err.returncode == 2 and 'knowledge base "nope" does not exist' in err.stderr
    err = kbpg("--dsn", dsn, "search", "cli", "x", "--filter", "{bad json", check=False)
    assert err.returncode == 2 and "--filter is not valid JSON" in err.stderr


def test_eval_on_a_tiny_beir_dataset(dsn: str, tmp_path: Path) -> None:
    ds = tmp_path / "tiny"
    (ds / "qrels").mkdir(parents=True)
    corpus = {
        "d1": ("Cats", "Cats are small felines that hunt mice."),
        "d2": ("Tea", "Green tea is brewed at eighty degrees."),
        "d3": ("Volcanoes", "Volcanoes erupt molten lava and ash."),
        "d4": ("Bread", "Sourdough bread rises with a starter culture."),
    }
    (ds / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": k, "title": t, "text": x}) + "\n" for k, (t, x) in corpus.items()
        )
    )
    (ds / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "which animal hunts mice"})
        + "\n"
        + json.dumps({"_id": "q2", "text": "lava from a volcano"})
        + "\n"
        + json.dumps({"_id": "q9", "text": "not judged"})
        + "\n"
    )
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    out = kbpg("--dsn", dsn, "eval", str(ds), "--method", "hybrid", "--json").stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["method"] == "hybrid" and result["queries"] == 2
    assert set(result) >= {"ndcg@10", "recall@10", "recall@100", "mrr@10"}
    assert result["ndcg@10"] == 1.0 and result["mrr@10"] == 1.0
    # The second run reuses the loaded KB.
    again = kbpg("--dsn", dsn, "eval", str(ds), "--method", "full_text")
    assert "reusing knowledge base 'beir-tiny'" in again.stderr
    assert "ndcg@10" in again.stdout


def _kbpg(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "KBPG_"))}
    return subprocess.run(
        [sys.executable, "-m", "kbpg.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_connection_failures_are_one_line_and_a_hint(dsn: str) -> None:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    cases = [
        (
            "host=127.0.0.1 port=1 dbname=x connect_timeout=5",
            "Connection refused",
            "is PostgreSQL running there",
        ),
        (f"host={info['host']} port={info['port']} user={info['user']} dbname=no_such_db",
         'database "no_such_db"',
         "create it"),
        (f"host={info['host']} port={info['port']} dbname={info['dbname']} user=nobody_here",
         'role "nobody_here" does not exist', "CREATE ROLE"),
        ("not a dsn ===", "the connection string is malformed", "host=HOST port=5432"),
    ]  # fmt: skip
    for conninfo, message, hint in cases:
        for command in (["status"], ["kb", "list"], ["search", "k", "q"], ["worker", "--once"]):
            out = _kbpg("--dsn", conninfo, *command)
            assert out.returncode == 2, (command, out.stderr)
            assert out.stderr.startswith("kbpg: error: "), (command, out.stderr)
            assert "Traceback" not in out.stderr, (command, out.stderr)
            assert message in out.stderr, (command, out.stderr)
            assert hint in out.stderr.split("  hint: ", 1)[1], (command, out.stderr)
            assert len(out.stderr.strip().splitlines()) == 2
    # -v keeps the traceback for whoever wants it.
    out = _kbpg("-v", "--dsn", "host=127.0.0.1 port=1 dbname=x", "status")
    assert out.returncode != 0 and "Traceback" in out.stderr


def test_worker_waits_for_an_unreachable_server_visibly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbpg.cli", "--dsn", "host=127.0.0.1 port=1 dbname=x", "worker"],
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith(("PG", "KBPG_"))},
    )
    try:
        lines: list[str] = []
        assert proc.stderr is not None
        while len(lines) < 3:
            line = proc.stderr.readline()
            assert line, lines
            lines.append(line)
    finally:
        proc.terminate()
        proc.wait(30)
    assert all("cannot connect to the database" in line for line in lines)
    # Each retry says when, and waits longer: 0.5, 1, 2 s...
    assert [line.rsplit("retrying in ", 1)[1].strip() for line in lines] == [
        "0.5 s",
        "1.0 s",
        "2.0 s",
    ]
    assert proc.returncode == 0  # SIGTERM: stopped cleanly


def test_doctor_reports_each_check_and_what_to_do(dsn: str, conn: psycopg.Connection) -> None:
    conn.execute("SELECT kb.create_knowledge_base('doc_kb')")
    conn.execute("SELECT kb.add_document('doc_kb', 'a', 'Harbour office hours.')")
    out = kbpg("--dsn", dsn, "doctor", check=False)
    # A queued job and no worker: a problem, with what to do; exit status 1.
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout
    for check in ("server", "plpython3u", "pgvector", "schema", "kb.python_path",
                  "PL/Python", "HNSW indexes", "queue"):  # fmt: skip
        assert check in lines, (check, lines)
    assert "PROBLEM  queue" in lines and "-> start one: kbpg --dsn ... worker" in lines
    assert "ok       PL/Python       loads kbpg's package" in lines
    # Broken: a generation's HNSW index dropped, and a job failed for good.
    (ix,) = conn.execute(
        "SELECT active_index_id FROM kb.knowledge_base WHERE name = 'doc_kb'"
    ).fetchone()
    conn.execute(f"DROP INDEX kb.embedding_hnsw_{ix}")
    conn.execute("UPDATE kb.job SET status = 'failed', last_error = 'boom'")
    lines = kbpg("--dsn", dsn, "doctor", check=False).stdout
    assert f"doc_kb (generation {ix}: missing)" in lines and "kbpg kb reindex NAME" in lines
    assert "1 job(s) failed for good" in lines


def test_uninstall_asks_then_removes_everything(dsn: str, conn: psycopg.Connection) -> None:
    conn.execute("SELECT kb.create_knowledge_base('gone_kb')")
    refused = subprocess.run(
        [*KBPG, "--dsn", dsn, "uninstall"], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    assert conn.execute("SELECT to_regnamespace('kb') IS NOT NULL").fetchone() == (True,)
    done = kbpg("--dsn", dsn, "uninstall", "--yes")
    assert "removed the kb schema" in done.stdout
    assert "left: extension vector" in done.stdout and "left: extension plpython3u" in done.stdout
    assert conn.execute("SELECT to_regnamespace('kb') IS NULL").fetchone() == (True,)
    again = kbpg("--dsn", dsn, "uninstall", "--yes", check=False)
    assert again.returncode == 2 and "not installed" in again.stderr
    # And installs again from scratch.
    kbpg("--dsn", dsn, "install")
    assert conn.execute("SELECT count(*) FROM kb.knowledge_base").fetchone() == (0,)


def test_sync_status_and_retry(dsn: str, tmp_path: Path) -> None:
    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "tea.md").write_text("# Tea\n\nGreen tea is brewed at 80 degrees.\n")
    (docs / "bread.md").write_text("# Bread\n\nSourdough bread rises with a starter.\n")
    kbpg("--dsn", dsn, "kb", "create", "synced")
    dry = kbpg("--dsn", dsn, "sync", "synced", str(docs), "--dry-run").stdout
    assert "added     bread.md" in dry and "would be: 2 added" in dry
    assert "none (kbpg sync adds" in kbpg("--dsn", dsn, "status", "synced").stdout
    first = kbpg("--dsn", dsn, "sync", "synced", str(docs), "--wait").stdout
    assert "2 added, 0 changed, 0 removed" in first
    (docs / "bread.md").unlink()
    (docs / "tea.md").rename(docs / "green-tea.md")
    # Both files gone from the source's view: more than half, so it stops.
    (docs / "green-tea.md").write_text("# Tea\n\nGreen tea is brewed at 75 degrees.\n")
    stop = kbpg("--dsn", dsn, "sync", "synced", str(docs), check=False)
    assert stop.returncode == 2 and "would remove 2 of the 2 documents" in stop.stderr
    forced = kbpg("--dsn", dsn, "sync", "synced", str(docs), "--force", "--wait").stdout
    assert "1 added, 0 changed, 2 removed" in forced
    status = kbpg("--dsn", dsn, "status", "synced").stdout
    assert str(docs.resolve()) in status and "documents: ready 1" in status
    assert "queued 0 failed documents again" in kbpg("--dsn", dsn, "retry", "synced").stdout
    err = kbpg("--dsn", dsn, "sync", "synced", str(docs / "nope"), check=False)
    assert err.returncode == 2 and "not a folder" in err.stderr
