"""ingest: the indexing worker against the raw model in warm processes; a remote provider; a large PDF."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import scifact_dir
from kbpg.db import scalar


def _fresh_kb(
    dsn: str, name: str, config: dict[str, Any], docs: list[Any], texts: list[str]
) -> None:
    """A new KB holding ``texts`` (queued, not indexed yet)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (name,))
        conn.execute("SELECT kb.create_knowledge_base(%s, %s)", (name, json.dumps(config)))
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "SELECT kb.add_document(%s, %s, %s)",
                [(name, d, t) for (d, _), t in zip(docs, texts, strict=True)],
            )


def _drop_and_vacuum(dsn: str, names: list[str]) -> None:
    """Drops these KBs where they exist and vacuums the database, so that cleaning up
    after them is done before the next measurement rather than during it."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute("SELECT kb.drop_knowledge_base(%s, true)", (name,))
        conn.execute("VACUUM")


class _SlowEmbedder:
    """An OpenAI-compatible embeddings endpoint that answers each request after a fixed
    delay (a provider's round trip), with hashed vectors; it counts requests."""

    def __init__(self, delay: float, dim: int = 64) -> None:
        import hashlib
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests = 0
        lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with lock:
                    owner.requests += 1
                time.sleep(delay)
                data = []
                for i, text in enumerate(body["input"]):
                    seed = hashlib.blake2b(text.encode(), digest_size=8).digest()
                    vec = np.random.default_rng(int.from_bytes(seed, "little")).normal(size=dim)
                    data.append(
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": (vec / np.linalg.norm(vec)).tolist(),
                        }
                    )
                n = sum(len(t.split()) for t in body["input"])
                raw = json.dumps(
                    {
                        "object": "list",
                        "data": data,
                        "model": body.get("model"),
                        "usage": {"prompt_tokens": n, "total_tokens": n},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _ingest_remote(
    dsn: str, docs: list[Any], texts: list[str], chunks: list[str], delay: float = 0.1
) -> dict[str, Any]:
    """Many small documents through a remote provider whose every request takes ``delay``
    seconds: the worker one job at a time vs claiming 16 and embedding them together, and
    the provider's own ceiling (all chunks in batches of 64, 4 requests in flight)."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    from kbpg.worker import Worker

    server = _SlowEmbedder(delay)
    try:
        # The provider's key for the worker's sessions only (litellm wants one).
        key_dsn = make_conninfo(dsn, options="-c kb.bench_embed_key=unused")
        config = {
            "embedding_model": "openai/bench-embed",
            "embedding_dimensions": 64,
            "api_base": server.url,
            "api_key_name": "BENCH_EMBED_KEY",
        }
        from concurrent.futures import ThreadPoolExecutor
        from urllib.request import Request, urlopen

        def post(batch: list[str]) -> None:
            req = Request(
                server.url + "/embeddings",
                json.dumps({"input": batch}).encode(),
                {"Content-Type": "application/json"},
            )
            urlopen(req).read()

        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(post, [chunks[i : i + 64] for i in range(0, len(chunks), 64)]))
        out: dict[str, Any] = {
            "workload": f"the same {len(docs)} documents, a provider answering each request "
            f"after {delay * 1000:.0f} ms (local HTTP server, real litellm client), batch_size "
            "64, embedding_concurrency 4, one worker thread",
            "provider_ceiling_chunks_per_s": round(len(chunks) / (time.perf_counter() - t0), 1),
        }
        for batch in (1, 16):
            _fresh_kb(dsn, "bench-ingest-remote", config, docs, texts)
            server.requests = 0
            t0 = time.perf_counter()
            Worker(key_dsn, concurrency=1, once=True, poll_interval=0.2, batch=batch).run()
            out[f"batch{batch}"] = {
                "chunks_per_s": round(len(chunks) / (time.perf_counter() - t0), 1),
                "requests": server.requests,
            }
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT kb.drop_knowledge_base('bench-ingest-remote', true)")
    finally:
        server.close()
    return out


def _raw_server(threads: int, barrier: Any, warm: list[str], commands: Any, results: Any) -> None:
    """A process of the raw model (the raw_model figure): loads it at ``threads``
    ONNX threads and warms it, then for each list of texts it is sent waits for the other
    processes of its group, embeds them in batches of 64 and reports when it ran."""
    from kbpg_db.embedding import LocalMiniLM

    model = LocalMiniLM(threads=threads)
    model.embed(warm)
    results.put(None)
    while (texts := commands.get()) is not None:
        barrier.wait()
        t0 = time.time()
        model.embed(texts, batch_size=64)
        results.put((t0, time.time()))


class _RawModel:
    """The raw model as ``processes`` processes of ``threads`` ONNX threads each, loaded
    once and kept (a measurement costs only the embedding): ``rate(texts)`` embeds the texts
    shared out over the processes, in chunks/s from the first start to the last end."""

    def __init__(self, processes: int, threads: int, warm: list[str]) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        barrier, self.results = ctx.Barrier(processes), ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(processes)]
        self.procs = [
            ctx.Process(target=_raw_server, args=(threads, barrier, warm, q, self.results),
                        daemon=True)
            for q in self.commands
        ]  # fmt: skip
        for proc in self.procs:
            proc.start()
        for _ in self.procs:
            self.results.get(timeout=600)

    def rate(self, texts: list[str]) -> float:
        n = len(self.commands)
        for i, q in enumerate(self.commands):
            q.put(texts[i::n])
        spans = [self.results.get(timeout=900) for _ in self.commands]
        return len(texts) / (max(e for _, e in spans) - min(s for s, _ in spans))

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for proc in self.procs:
            proc.join(timeout=60)


class _RunningWorker:
    """A `kbpg worker` with default settings, running in a thread over a new KB;
    ``ingest(items)`` queues documents in one commit and returns the seconds until all are
    ready. It waits for work on NOTIFY (polling every 2 s, its default), so between
    ingestions it costs the machine next to nothing."""

    def __init__(self, dsn: str, kb: str) -> None:
        import threading

        import psycopg

        from kbpg.worker import Worker

        _fresh_kb(dsn, kb, {}, [], [])
        self.worker = Worker(dsn)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.kb = kb
        self.kb_id = scalar(self.conn, "SELECT id FROM kb.knowledge_base WHERE name = %s", (kb,))
        self.queued = 0
        self.thread.start()

    def ingest(self, items: list[tuple[str, str]]) -> float:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany("SELECT kb.add_document(%s, %s, %s)", [(self.kb, *i) for i in items])
        t0 = time.perf_counter()
        self.queued += len(items)
        deadline, done0 = time.monotonic() + 1800, None
        while (
            done := scalar(
                self.conn,
                "SELECT count(*) FROM kb.document WHERE kb_id = %s AND status = 'ready'",
                (self.kb_id,),
            )
        ) < self.queued:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the worker stopped before the documents were ready")
            # The poll's own cost stays out of the figure: ten counts a second took
            # 0.25 core-s of a 35 s run. A quarter of the time the rest should take at the
            # rate so far (1 s at most, 20 ms at the least) keeps it to a few polls a second
            # at most, and the end within a few tens of milliseconds.
            done0 = done if done0 is None else done0
            elapsed = time.perf_counter() - t0
            rate = (done - done0) / elapsed if elapsed > 0 else 0.0
            time.sleep(min(1.0, max(0.02, (self.queued - done) / rate / 4)) if rate > 0 else 0.1)
        return time.perf_counter() - t0

    def close(self) -> int:
        self.worker.stop()
        self.thread.join()
        self.conn.close()
        return self.worker.concurrency


def ingest_ratio(
    worker_seconds: list[float], chunks: list[int], raw_rates: dict[str, list[tuple[float, float]]]
) -> dict[str, Any]:
    """The worker against the raw model, from interleaved measurements: segment i's
    ``chunks[i]`` took the worker ``worker_seconds[i]``, and each raw configuration ran at
    ``raw_rates[c][i]`` = (chunks/s just before it, just after it). A segment's raw time is
    its chunks at the mean of the two rates; the raw figure is the configuration with the
    least raw time over all segments; ratio = its time / the worker's."""
    if len(worker_seconds) != len(chunks) or any(len(r) != len(chunks) for r in raw_rates.values()):
        raise ValueError("ingest_ratio: one worker time and one pair of raw rates per segment")
    raw_seconds = {
        c: [n / ((a + b) / 2) for n, (a, b) in zip(chunks, r, strict=True)]
        for c, r in raw_rates.items()
    }
    best = min(raw_seconds, key=lambda c: sum(raw_seconds[c]))
    total = sum(chunks)
    return {
        "raw_configuration": best,
        "raw_model_chunks_per_s": round(total / sum(raw_seconds[best]), 1),
        "worker_chunks_per_s": round(total / sum(worker_seconds), 1),
        "ratio": round(sum(raw_seconds[best]) / sum(worker_seconds), 3),
        "segment_ratios": [
            round(r / w, 3) for r, w in zip(raw_seconds[best], worker_seconds, strict=True)
        ],
    }


def bench_ingest(dsn: str, quick: bool) -> dict[str, Any]:
    import psycopg
    from kbpg_db.chunking import chunk_text

    from kbpg.client import Client
    from kbpg.evaluate import load_beir
    from kbpg.worker import Worker

    n_docs = 100 if quick else 400
    data = load_beir(scifact_dir(), "test")
    docs = list(data.corpus.items())[-n_docs:]
    texts = [f"{t}\n{x}" for _, (t, x) in docs]
    doc_chunks = [[c.embed_text for c in chunk_text(t)] for t in texts]
    chunks = [c for d in doc_chunks for c in d]
    with psycopg.connect(dsn, autocommit=True) as conn:
        cores = int(scalar(conn, "SELECT kb.server_cpu_count()"))
    threads = int(os.environ.get("KBPG_BENCH_THREADS", "0"))

    # This machine's speed drifts by tens of percent from one half-minute to the next (the
    # same raw run: 32 to 47 chunks/s within three minutes), so whole runs of raw, worker,
    # raw compared a worker run with raw runs a minute away from it. Instead the documents
    # are ingested in segments (every n-th document, so the segments are alike), each
    # between two short raw runs on the same chunks, with the raw model's processes and
    # the worker's connections loaded and warm throughout.
    segments = 2 if quick else 4
    passes = 1 if quick else 3
    configs = {f"1 process, {threads or cores} threads": (1, threads)}
    if cores > 1:
        configs[f"{cores} processes, 1 thread"] = (cores, 1)
    out: dict[str, Any] = {
        "workload": f"{n_docs} SciFact documents, {len(chunks)} chunks (default config), "
        f"ingested by a running `kbpg worker` (default settings) in {segments} like segments "
        f"(document i in segment i mod {segments}), {passes} pass(es), each timed from the "
        "commit that queues it until all are ready. raw = the same model in this machine's processes, "
        "loaded and warm, batch 64, run on the segment's chunks just before and just after "
        "it: the better of " + " and ".join(configs) + " over all segments. ratio = raw "
        "time / worker time over all segments. cold = started with the documents queued, "
        "loading the model in each connection"
    }
    # Each pass gets a KB of its own, none dropped until the passes are over: the rows a
    # drop leaves dead are cleaned up by autovacuum (here at the next minute mark, ~1 s of a
    # core), which should not land in a measured segment. What an earlier run left is
    # dropped and vacuumed now, before anything is measured.
    pass_kbs = [f"bench-ingest-{p + 1}" for p in range(passes)]
    _drop_and_vacuum(dsn, [*pass_kbs, "bench-ingest"])
    raws = {name: _RawModel(n, t, chunks[:64]) for name, (n, t) in configs.items()}
    members = [range(s, len(docs), segments) for s in range(segments)]
    parts = [[c for i in idx for c in doc_chunks[i]] for idx in members]
    worker_seconds: list[float] = []
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    try:

        def measure(part: list[str]) -> dict[str, float]:
            return {name: raw.rate(part) for name, raw in raws.items()}

        for kb in pass_kbs:
            running = _RunningWorker(dsn, kb)
            # Each connection's server process loads the model before the measurement.
            running.ingest(
                [(d, f"{t}\n{x}") for d, (t, x) in list(data.corpus.items())[: 4 * cores]]
            )
            before = measure(parts[0])
            for s, idx in enumerate(members):
                worker_seconds.append(running.ingest([(docs[i][0], texts[i]) for i in idx]))
                # Just after this segment, on the next one's chunks: also the next one's before.
                after = measure(parts[min(s + 1, segments - 1)])
                for name in configs:
                    rates[name].append((before[name], after[name]))
                before = after
            connections = running.close()
    finally:
        for raw in raws.values():
            raw.close()
    out.update(ingest_ratio(worker_seconds, [len(p) for p in parts] * passes, rates))
    out["worker_connections"] = connections
    # Per configuration and segment: (chunks/s just before, just after).
    out["raw_rates_chunks_per_s"] = {
        name: [[round(a, 1), round(b, 1)] for a, b in pairs] for name, pairs in rates.items()
    }
    out["target"] = "ratio >= 0.9"
    _drop_and_vacuum(dsn, pass_kbs)
    _fresh_kb(dsn, "bench-ingest", {}, docs, texts)
    t0 = time.perf_counter()
    Worker(dsn, once=True, poll_interval=0.2).run()
    out["worker_cold_chunks_per_s"] = round(len(chunks) / (time.perf_counter() - t0), 1)
    # The same documents one job at a time (no embedding across documents).
    _fresh_kb(dsn, "bench-ingest", {}, docs, texts)
    t0 = time.perf_counter()
    Worker(dsn, once=True, poll_interval=0.2, batch=1).run()
    out["worker_cold_batch1_chunks_per_s"] = round(len(chunks) / (time.perf_counter() - t0), 1)
    out["remote"] = _ingest_remote(dsn, docs, texts, chunks)
    # A 200-page PDF from SciFact text, through `kbpg ingest --wait`.
    import pymupdf

    pages = 40 if quick else 200
    body = [f"{t}\n{x}" for _, (t, x) in list(data.corpus.items())[:pages]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scifact-book.pdf"
        pdf = pymupdf.open()
        for text in body:
            page = pdf.new_page()
            page.insert_textbox(pymupdf.Rect(40, 40, 570, 800), text, fontsize=8)
        pdf.save(path)
        with Client(dsn) as client:
            client.drop_knowledge_base("bench-pdf", if_exists=True)
            client.create_knowledge_base("bench-pdf")
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kbpg.cli",
                "--dsn",
                dsn,
                "ingest",
                "bench-pdf",
                str(path),
                "--wait",
            ],
            check=True,
            capture_output=True,
        )
        seconds = time.perf_counter() - t0
        with Client(dsn) as client:
            doc = client.document_status("bench-pdf")[0]
    out["pdf"] = {
        "pages": pages,
        "chunks": doc["chunk_count"],
        "status": doc["status"],
        "seconds_to_ready": round(seconds, 1),
    }
    return out
