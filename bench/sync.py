"""sync: keeping a knowledge base in step with a folder (kbpg sync) and a changed document.

- ``kbpg sync`` of an unchanged 1,000-file folder: seconds, and the files put and jobs
  queued (both should be 0);
- a one-paragraph edit of a 100-chunk document: chunks embedded again against the
  document's chunks (only the changed ones should be), and the rebuild's time against
  the first build's;
- time from a committed change (kb.put_document) to searchable, with an idle worker
  listening: p50 and p95;
- table sources: what the triggers add to an application's writes (10,000 rows inserted
  and updated, in one statement and one statement a row, against the same table without a
  source), and time from a committed row change to searchable with an idle worker.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import lat, say

KB = "bench-sync"
FILES = 1000
PARAGRAPHS = 100


def _paragraph(doc: int, p: int, edited: bool = False) -> str:
    what = "was edited to say something else entirely" if edited else "says what it says"
    return (
        f"## Section {p}\n\nSection {p} of document {doc} {what}: item {doc}-{p} "
        f"covers its own topic in a few plain sentences of text.\n"
    )


def _document(doc: int, paragraphs: int, edited: int | None = None) -> str:
    return f"# Document {doc}\n\n" + "\n".join(
        _paragraph(doc, p, p == edited) for p in range(paragraphs)
    )


def _until_searchable(client: Any, marker: str, change: Any) -> float:
    """Seconds from ``change(marker)`` (committed) until a search finds the marker."""
    t0 = time.perf_counter()
    change(marker)
    while True:
        hits = client.search(KB, marker, method="full_text", term_expansion=0, top_k=1)
        if hits and marker in hits[0].content:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > 30:
            raise RuntimeError(f"a change took over 30 s to become searchable ({marker})")
        time.sleep(0.01)


def _drain(dsn: str) -> float:
    from kbpg.worker import Worker

    t0 = time.perf_counter()
    Worker(dsn, once=True, poll_interval=0.1).run()
    return time.perf_counter() - t0


def bench_sync(dsn: str, quick: bool) -> dict[str, Any]:
    from kbpg.client import Client
    from kbpg.sync import sync
    from kbpg.worker import Worker

    files = 200 if quick else FILES
    out: dict[str, Any] = {
        "workload": f"kbpg sync of an unchanged {files}-file folder; a one-paragraph edit of a "
        f"{PARAGRAPHS}-chunk document; put to searchable with an idle worker (default model)"
    }
    with Client(dsn) as client:
        client.conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (KB,))
        client.create_knowledge_base(KB)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "notes"
            folder.mkdir()
            for i in range(files):
                (folder / f"note-{i:04d}.md").write_text(_document(i, 3))
            say(f"sync: first sync of {files} files")
            t0 = time.perf_counter()
            sync(client, KB, folder, report=lambda _line: None)
            out["first_sync_s"] = round(time.perf_counter() - t0, 2)
            jobs_before = client.conn.execute(
                "SELECT count(*) FROM kb.job j JOIN kb.knowledge_base k ON k.id = j.kb_id "
                "WHERE k.name = %s",
                (KB,),
            ).fetchone()[0]
            times, changed = [], 0
            for _ in range(3):
                t0 = time.perf_counter()
                _, done = sync(client, KB, folder, report=lambda _line: None)
                times.append(time.perf_counter() - t0)
                changed += done["added"] + done["changed"] + done["moved"] + done["removed"]
            jobs_after = client.conn.execute(
                "SELECT count(*) FROM kb.job j JOIN kb.knowledge_base k ON k.id = j.kb_id "
                "WHERE k.name = %s",
                (KB,),
            ).fetchone()[0]
            out["unchanged_sync_s"] = round(statistics.median(times), 3)
            out["unchanged_sync_files_put"] = changed
            out["unchanged_sync_jobs_queued"] = jobs_after - jobs_before
        client.conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (KB,))
        client.create_knowledge_base(KB)
        time.sleep(0.5)

        # A 100-chunk document, built, then one paragraph edited.
        client.add_text(KB, "long.md", _document(0, PARAGRAPHS))
        say("sync: first build of a 100-chunk document")
        first = _drain(dsn)
        client.add_text(KB, "long.md", _document(0, PARAGRAPHS, edited=PARAGRAPHS // 2))
        again = _drain(dsn)
        row = client.document_status(KB, "long.md")[0]
        out["edit_chunks"] = row["chunk_count"]
        out["edit_chunks_embedded"] = row["chunk_count"] - row["chunks_reused"]
        out["edit_rebuild_s"] = round(again, 2)
        out["first_build_s"] = round(first, 2)

        # Put to searchable, an idle worker listening.
        worker = Worker(dsn, concurrency=1, poll_interval=2.0)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        time.sleep(3)  # the worker is listening and its model loaded
        waits = [
            _until_searchable(
                client,
                f"marker{i}x",
                lambda m: client.add_text(
                    KB, "live.md", f"# Live\n\nThe live document now says {m}."
                ),
            )
            for i in range(10 if quick else 30)
        ]
        worker.stop()
        thread.join(30)
        out["put_to_searchable"] = lat(waits)
        out.update(_table_source(client, dsn, quick))
        client.conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (KB,))
    return out


def _write_times(conn: Any, table: str, rows: int) -> dict[str, float]:
    """Seconds to insert and update ``rows`` rows, in one statement and one a row."""
    out = {}
    conn.execute(f"TRUNCATE {table}")
    t0 = time.perf_counter()
    conn.execute(
        f"INSERT INTO {table} (id, name, body) SELECT i, 'item ' || i, "
        f"'the text of item ' || i FROM generate_series(1, {rows}) i"
    )
    out["insert_statement"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    conn.execute(f"UPDATE {table} SET body = body || ' (changed)'")
    out["update_statement"] = time.perf_counter() - t0
    conn.execute(f"TRUNCATE {table}")
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {table} (id, name, body) VALUES (%s, %s, %s)",
            [(i, f"item {i}", f"the text of item {i}") for i in range(1, rows + 1)],
        )
    out["insert_rows"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(
            f"UPDATE {table} SET body = body || ' (changed)' WHERE id = %s",
            [(i,) for i in range(1, rows + 1)],
        )
    out["update_rows"] = time.perf_counter() - t0
    return out


def _table_source(client: Any, dsn: str, quick: bool) -> dict[str, Any]:
    from kbpg.worker import Worker

    conn = client.conn
    rows = 2000 if quick else 10_000
    for t in ("bench_plain", "bench_followed"):
        conn.execute(f"DROP TABLE IF EXISTS public.{t}")
        conn.execute(f"CREATE TABLE public.{t} (id bigint PRIMARY KEY, name text, body text)")
    conn.execute(
        "SELECT kb.add_table_source(%s, 'public.bench_followed', 'id', ARRAY['body'], "
        "title_column => 'name')",
        (KB,),
    )
    say(f"sync: {rows} rows written with and without a table source")
    plain: dict[str, list[float]] = {}
    followed: dict[str, list[float]] = {}
    for _ in range(5):  # alternating, the median of five
        for table, into in (("public.bench_plain", plain), ("public.bench_followed", followed)):
            for k, v in _write_times(conn, table, rows).items():
                into.setdefault(k, []).append(v)
    ratios = {
        k: round(statistics.median(followed[k]) / statistics.median(plain[k]), 2) for k in plain
    }
    conn.execute("TRUNCATE public.bench_followed")
    conn.execute("DELETE FROM kb.source_change")
    conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (KB,))
    client.create_knowledge_base(KB)
    conn.execute(
        "SELECT kb.add_table_source(%s, 'public.bench_followed', 'id', ARRAY['body'], "
        "title_column => 'name')",
        (KB,),
    )
    conn.execute("INSERT INTO public.bench_followed VALUES (1, 'live row', 'nothing yet')")
    worker = Worker(dsn, concurrency=1, poll_interval=2.0)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    time.sleep(3)
    waits = [
        _until_searchable(
            client,
            f"rowmarker{i}x",
            lambda m: conn.execute(
                "UPDATE public.bench_followed SET body = %s WHERE id = 1", (f"now {m}",)
            ),
        )
        for i in range(10 if quick else 30)
    ]
    worker.stop()
    thread.join(30)
    for t in ("bench_plain", "bench_followed"):
        conn.execute(f"DROP TABLE public.{t}")
    return {
        "table_source_write_ratio": ratios,
        # What the trigger adds to each statement of one row (10,000 of them).
        "table_source_us_per_row_statement": {
            k: round((statistics.median(followed[k]) - statistics.median(plain[k])) / rows * 1e6, 1)
            for k in ("insert_rows", "update_rows")
        },
        "table_source_write_s": {k: round(statistics.median(followed[k]), 3) for k in followed},
        "row_change_to_searchable": lat(waits),
    }
