"""The indexing worker: claims jobs and has the database run them.

The worker does no indexing itself. Each thread owns a connection, claims jobs with
``kb.claim_jobs`` (FOR UPDATE SKIP LOCKED) and calls ``kb.process_job`` for each, which
chunks, embeds and swaps the document's chunks in one transaction inside PostgreSQL. A
thread claims up to ``batch`` jobs at once (at the end of the queue, smaller claims, the
largest documents first: claim_size, kb.claim_jobs) and has their chunks
embedded together first (``kb.prefetch_embeddings``): many small documents fill whole
batches instead of a request each. NOTIFY on
``kbpg_jobs`` only wakes the threads early; they poll regardless, so a lost notification
never stalls the queue. A lost connection is retried with backoff; a job whose worker
vanished is claimed again by anyone once its lease expires.

By default a worker opens one connection per core of the database server (at most
``AUTO_MAX_CONNECTIONS``) and gives each server process an equal share of the cores for
the local model's ONNX threads (``kb.onnx_threads``, unless the server's configuration or
the role sets it): while one process writes a document's rows, the others keep the cores
busy with the model, where one process alone would leave a core idle. The share is taken
per job, over the connections busy when it starts: a lone large document gets all cores
(job_threads).
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kbpg.errors import clean_message

log = logging.getLogger("kbpg.worker")

CHANNEL = "kbpg_jobs"
# Row changes of table sources applied per call of kb.apply_source_changes, per source.
SOURCE_BATCH = 2000
# Seconds a connection waits after a job it had no right to do, before claiming again.
RIGHTS_BACKOFF_S = 30.0
AUTO_MAX_CONNECTIONS = 4
# A document this large (its text, in bytes) may take the cores of idle connections.
LARGE_DOCUMENT_BYTES = 20_000


class Outcome(enum.Enum):
    """``kb.job_outcome``: what ``kb.process_job`` says of a job (the same values)."""

    DONE = "done"
    MORE = "more"  # a step of a long job committed; call again
    RETRY = "retry"
    FAILED = "failed"
    LOST = "lost"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"


@dataclass
class WorkerStats:
    done: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0  # taken over by another worker (this one's lease ran out)
    skipped: int = 0  # cancelled or superseded: nothing left to do
    lacking_rights: int = 0  # handed back: the worker's role may not do the job
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, outcome: str, seconds: float) -> None:
        with self.lock:
            setattr(self, outcome, getattr(self, outcome) + 1)
            self.seconds += seconds


def plan_connections(
    cpus: int, configured: str, concurrency: int | None, model_threads: int | None
) -> tuple[int, int | None]:
    """How many connections a worker opens, and the kb.onnx_threads each one sets (None:
    set nothing, the server's or the role's own setting or ONNX's default stands).

    ``cpus`` is the server's core count, ``configured`` what kb.onnx_threads already is for
    a new session ('' where unset); ``concurrency`` / ``model_threads`` what was asked for
    (None: choose). Connections default to one per core, at most AUTO_MAX_CONNECTIONS;
    threads, where nothing sets them, to an equal share of the cores.
    """
    n = concurrency if concurrency is not None else max(1, min(AUTO_MAX_CONNECTIONS, cpus))
    if model_threads is not None:
        return n, model_threads
    if configured or n == 1:
        return n, None
    return n, max(1, cpus // n)


def claim_size(queued: int, batch: int, concurrency: int) -> int:
    """How many jobs a thread claims: ``batch``, or at the end of the queue (``queued`` jobs
    due) half its share of them, so that the connections' last claims are small and they
    run out of work together rather than one waiting on another's last claim (one
    connection has no one to wait for: it takes what is due, up to ``batch``)."""
    if concurrency == 1:
        return max(1, min(batch, queued))
    return max(1, min(batch, -(-queued // (2 * concurrency))))


def job_threads(cpus: int, busy: int, share: int, size: int | None) -> int:
    """The ONNX threads for a job: its connection's ``share`` of the cores, or, for a large
    document (``size`` bytes of text or more; None: not converted yet, a file), the cores
    over the connections ``busy`` now. A thread count's first job in a server process
    loads the model for it (about 0.25 s), which only a long job repays."""
    if size is not None and size < LARGE_DOCUMENT_BYTES:
        return share
    return max(1, cpus // max(1, busy))


class Worker:
    def __init__(
        self,
        dsn: str,
        *,
        concurrency: int | None = None,
        once: bool = False,
        lease_seconds: float = 60.0,
        poll_interval: float = 2.0,
        name: str | None = None,
        kb: str | None = None,
        batch: int = 16,
        model_threads: int | None = None,
        durable_commits: bool = False,
    ) -> None:
        """``concurrency``: connections, each running one job at a time (None: one per core
        of the server, at most AUTO_MAX_CONNECTIONS). ``model_threads``: the local model's
        ONNX threads in each connection's server process (None: the server's cores shared
        out over the connections, where the server's configuration does not set
        kb.onnx_threads). ``durable_commits``: wait for each job's commit to reach the disk
        (synchronous_commit); by default a job's commit does not wait, and a server crash
        may undo the jobs that finished in its last moments (a fraction of a second): they
        are simply run again once their leases expire, nothing is left half-written."""
        if concurrency is not None and concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if model_threads is not None and model_threads < 1:
            raise ValueError("model_threads must be at least 1")
        if not 1 <= batch <= 1000:
            raise ValueError("batch must be between 1 and 1000")
        self.dsn = dsn
        self.concurrency = concurrency or 1
        self._auto_concurrency = concurrency is None
        self.model_threads = model_threads
        self.durable_commits = durable_commits
        self._onnx_threads: int | None = None  # what each connection sets, once sized
        self._per_job_threads = False
        self._cpus = 1
        self.once = once
        self.lease_seconds = lease_seconds
        self.batch = batch
        self.poll_interval = poll_interval
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.stats = WorkerStats()
        self._idle = [True] * self.concurrency  # a thread is busy from its first claim
        self._backlog = False  # the last claim left jobs queued for the other threads

    # --- signals ----------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            if self.stop_event.is_set():
                raise KeyboardInterrupt
            log.info(
                "received %s: finishing current jobs, then stopping", signal.Signals(signum).name
            )
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    # --- running ---------------------------------------------------------------------------
    def _size(self) -> None:
        """Connections and ONNX threads from the server's cores (see the module docstring)."""
        import psycopg

        from kbpg.errors import connection_error

        backoff = 0.5
        while True:
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    row = conn.execute(
                        "SELECT kb.server_cpu_count(), "
                        "coalesce(current_setting('kb.onnx_threads', true), '')"
                    ).fetchone()
                cpus, configured = row if row else (1, "")
                break
            except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
                failed = connection_error(exc)
                if self.once or isinstance(exc, psycopg.ProgrammingError):
                    raise failed from exc  # --once, or a malformed DSN: say so and stop
                if self.stop_event.is_set():
                    cpus, configured = 1, ""
                    break
                # A server that is down (or not up yet): wait for it, visibly.
                log.warning("%s; retrying in %.1f s", failed.message, backoff)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 30)
            except psycopg.Error as exc:
                log.warning("cannot read the server's core count (%s); one connection",
                            str(exc).strip().splitlines()[0])  # fmt: skip
                cpus, configured = 1, ""
                break
        self.concurrency, self._onnx_threads = plan_connections(
            int(cpus),
            configured,
            None if self._auto_concurrency else self.concurrency,
            self.model_threads,
        )
        self._cpus = int(cpus)
        # Chosen here, not asked for: a job takes the share of the cores of the connections
        # busy when it starts (a lone large document gets them all).
        self._per_job_threads = self._onnx_threads is not None and self.model_threads is None
        self._idle = [True] * self.concurrency  # a thread is busy from its first claim
        log.info(
            "worker %s: %s connection(s), local model threads in each: %s (server cores: %s)",
            self.name, self.concurrency,
            self._onnx_threads or (f"kb.onnx_threads = {configured}" if configured else "all"),
            cpus,
        )  # fmt: skip

    def run(self) -> WorkerStats:
        self._size()
        if self.stop_event.is_set():  # stopped while waiting for the server
            return self.stats
        threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"kbpg-worker-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        listener = threading.Thread(target=self._listen, name="kbpg-listen", daemon=True)
        listener.start()
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
        self.stop()
        return self.stats

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=True, application_name="kbpg-worker")
        # kb.onnx_threads before this server process loads the model (kb.python_init reads
        # it); unset, the server's own stands. synchronous_commit: see durable_commits.
        conn.execute(
            "SELECT CASE WHEN %(threads)s <> '' "
            "            THEN set_config('kb.onnx_threads', %(threads)s, false) END, "
            "       CASE WHEN %(quick)s THEN set_config('synchronous_commit', 'off', false) END",
            {"threads": str(self._onnx_threads or ""), "quick": not self.durable_commits},
        )
        return conn

    def _listen(self) -> None:
        import psycopg

        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    backoff = 0.5
                    while not self.stop_event.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self.wake.set()
            except psycopg.OperationalError:
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 10)

    def _refresh_communities(self, conn: Any) -> None:
        """With the queue empty: bring the knowledge-graph communities of KBs whose
        entities changed up to date (LLM summaries of new and changed ones)."""
        for kb, n, summarized, kept, removed, error in conn.execute(
            "SELECT * FROM kb.refresh_stale_communities()"
        ).fetchall():
            if error:
                log.warning("communities of %s: refresh failed: %s", kb, error)
            else:
                log.info(
                    "communities of %s: %s (%s summarised, %s kept, %s removed)",
                    kb, n, summarized, kept, removed,
                )  # fmt: skip

    def _refresh_term_vectors(self, conn: Any) -> None:
        """With the queue empty: embed the new words of generations whose chunks changed
        (full_text's term expansion)."""
        for kb, index_id, added, removed, error in conn.execute(
            "SELECT * FROM kb.refresh_term_vectors()"
        ).fetchall():
            if error:
                log.warning("term vectors of %s (generation %s): failed: %s", kb, index_id, error)
            elif added or removed:
                log.info(
                    "term vectors of %s (generation %s): %s words embedded, %s removed",
                    kb, index_id, added, removed,
                )  # fmt: skip

    def _apply_source_changes(self, conn: Any) -> None:
        """Turn table sources' queued row changes into documents and jobs (a few thousand
        keys a call; the rest at the next turn of the loop)."""
        for kb, source, applied, waiting, error in conn.execute(
            "SELECT * FROM kb.apply_source_changes(%s)", (SOURCE_BATCH,)
        ).fetchall():
            if error:
                log.warning("source %s of %s: %s", source, kb, error)
            if applied or waiting:
                log.info(
                    "source %s of %s: %s documents changed, %s row changes waiting",
                    source, kb, applied, waiting,
                )  # fmt: skip
            if waiting and not error:
                self.wake.set()

    def _refresh_url_sources(self, conn: Any) -> None:
        """With the queue empty: queue a fetch of the web sources' pages that are due."""
        for kb, source, queued in conn.execute("SELECT * FROM kb.refresh_url_sources()").fetchall():
            log.info("source %s of %s: %s pages to fetch again", source, kb, queued)
            if queued:
                self.wake.set()

    def _queue_empty(self, conn: Any) -> bool:
        """No job queued or running, and no row change of a table source waiting (one
        that cannot be applied now, its source broken or its role out of reach, aside)."""
        row = conn.execute(
            "SELECT (SELECT count(*) FROM kb.job WHERE status IN ('queued', 'running')) "
            "     + (SELECT count(*) FROM kb.source_change c JOIN kb.source s "
            "          ON s.kb_id = c.kb_id AND s.id = c.source_id "
            "         WHERE s.state = 'active' AND s.last_error IS NULL)"
        ).fetchone()
        return int(row[0]) == 0

    def _claim_size(self, conn: Any) -> tuple[int, int]:
        """How many jobs this thread claims (claim_size), and how many are due."""
        row = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM kb.job WHERE status = 'queued' "
            "AND run_after <= now() LIMIT %s) q",
            (2 * self.batch * self.concurrency,),
        ).fetchone()
        queued = int(row[0])
        return claim_size(queued, self.batch, self.concurrency), queued

    def _loop(self, index: int) -> None:
        import psycopg

        worker_id = f"{self.name}:{index}"
        conn = None
        threads = self._onnx_threads  # kb.onnx_threads as this connection last set it
        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                    threads = self._onnx_threads
                    backoff = 0.5
                if index == 0:
                    self._apply_source_changes(conn)
                # A claim's jobs are one KB's (kb.claim_jobs).
                size, queued = self._claim_size(conn)
                jobs = conn.execute(
                    "SELECT j.kb_id, j.id, j.document_id, j.attempts, j.max_attempts, d.title, "
                    "k.name, octet_length(d.content) "
                    "FROM kb.claim_jobs(%s, %s, %s) j "
                    "JOIN kb.document d ON d.kb_id = j.kb_id AND d.id = j.document_id "
                    "JOIN kb.knowledge_base k ON k.id = j.kb_id ORDER BY j.id",
                    (worker_id, size, self.lease_seconds),
                ).fetchall()
                if not jobs:
                    self._idle[index] = True
                    self._backlog = False
                    if index == 0 and self._queue_empty(conn):
                        self._refresh_communities(conn)
                        self._refresh_term_vectors(conn)
                        self._refresh_url_sources(conn)
                    if self.once and all(self._idle) and self._queue_empty(conn):
                        return
                    self.wake.wait(self.poll_interval)
                    self.wake.clear()
                    continue
                self._idle[index] = False
                # Jobs left for the others: they will be busy as soon as they claim (a
                # job starting meanwhile must not take their cores).
                self._backlog = queued > len(jobs)
                renewed = time.monotonic()
                if len(jobs) > 1:
                    # Several documents' chunks in full batches, one call; each job then
                    # finds its vectors ready (same connection, same server process).
                    conn.execute(
                        "SELECT kb.prefetch_embeddings(%s, %s, %s)",
                        (jobs[0][0], [j[1] for j in jobs], worker_id),
                    )
                waiting = list(jobs)
                while waiting:
                    job = waiting.pop(0)
                    if self.stop_event.is_set():  # stopping: the rest go back to the queue
                        self._release(conn, worker_id, [job, *waiting])
                        break
                    # The jobs still waiting keep their leases: renewed once a quarter of
                    # a lease has passed (a statement and a commit saved per short job).
                    if job is not jobs[0] and time.monotonic() - renewed >= self.lease_seconds / 4:
                        conn.execute(
                            "SELECT kb.renew_leases(%s, %s, %s)",
                            (job[0], [j[1] for j in [job, *waiting]], worker_id),
                        )
                        renewed = time.monotonic()
                    if self._per_job_threads and self._onnx_threads:
                        busy = (
                            self.concurrency
                            if self._backlog
                            else sum(not idle for idle in self._idle)
                        )
                        want = job_threads(self._cpus, busy, self._onnx_threads, job[7])
                        if want != threads:
                            threads = want
                            conn.execute(
                                "SELECT set_config('kb.onnx_threads', %s, false)", (str(threads),)
                            )
                    self._run_job(conn, worker_id, job, waiting)
            except psycopg.OperationalError as exc:
                log.warning(
                    "%s (%s); reconnecting in %.1f s",
                    "database connection lost" if conn is not None else "cannot reach the database",
                    " ".join(str(exc).split()) or exc,
                    backoff,
                )
                if conn is not None:
                    conn.close()
                conn = None
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, 10)
        if conn is not None:
            conn.close()

    def _release(self, conn: Any, worker_id: str, jobs: list[tuple[Any, ...]]) -> None:
        """Hand claimed jobs back to the queue; their attempts do not count."""
        for job in jobs:
            conn.execute("SELECT kb.release_job(%s, %s, %s)", (job[0], job[1], worker_id))
        if jobs:
            self.wake.set()  # an idle connection takes them now, not at its next poll

    def _run_job(
        self, conn: Any, worker_id: str, job: tuple[Any, ...], waiting: list[tuple[Any, ...]]
    ) -> None:
        """Run one job to its end, a step at a time. A job that takes steps (an LLM
        strategy's) runs for minutes: the jobs ``waiting`` behind it in this claim go back
        to the queue at its first step, for the other connections and workers, instead of
        waiting out their leases (and being claimed again, an attempt counted each time)."""
        import psycopg

        kb_id, job_id, _doc_id, attempt, max_attempts, title, kb, _size = job
        log.info(
            "job %s started: %s / %s (attempt %s/%s)", job_id, kb, title, attempt, max_attempts
        )
        t0 = time.monotonic()
        steps = 0
        try:
            while True:
                row = conn.execute(
                    "SELECT kb.process_job(%s, %s, %s)::text", (kb_id, job_id, worker_id)
                ).fetchone()
                outcome = Outcome(row[0])
                steps += 1
                progress = error = None
                if outcome in (Outcome.MORE, Outcome.RETRY, Outcome.FAILED):
                    # A second statement: the first one's snapshot predates what the job
                    # wrote.
                    progress, error = conn.execute(
                        "SELECT progress, last_error FROM kb.job WHERE kb_id = %s AND id = %s",
                        (kb_id, job_id),
                    ).fetchone()
                if outcome is not Outcome.MORE or self.stop_event.is_set():
                    break
                if waiting:
                    self._release(conn, worker_id, waiting)
                    waiting.clear()
                log.info("job %s: %s (step %s)", job_id, progress or "working", steps)
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                raise psycopg.OperationalError(str(exc)) from exc
            message = clean_message((exc.diag.message_primary or str(exc)).strip())
            if exc.diag.message_detail:
                message += f" ({exc.diag.message_detail})"
            if exc.sqlstate == "42501":
                # The worker's own rights, not the document: the job goes back with its
                # attempt not counted, and says why.
                self._lacks_rights(conn, worker_id, job, message)
                return
            verdict = conn.execute(
                "SELECT kb._job_verdict(kb.fail_job(%s, %s, %s, %s))::text",
                (kb_id, job_id, worker_id, message),
            ).fetchone()[0]
            self._report(Outcome(verdict), job_id, kb, title, time.monotonic() - t0, message)
            return
        if outcome is Outcome.MORE:  # stopping: hand the job back, its cached answers stay
            conn.execute("SELECT kb.release_job(%s, %s, %s)", (kb_id, job_id, worker_id))
        self._report(outcome, job_id, kb, title, time.monotonic() - t0, error)

    def _lacks_rights(self, conn: Any, worker_id: str, job: tuple[Any, ...], message: str) -> None:
        kb_id, job_id, *_ = job
        user = conn.execute("SELECT current_user").fetchone()[0]
        why = (
            f"the worker connects as {user}, which may not do kbpg's indexing ({message}); "
            "run kbpg worker as the kb schema's owner"
        )
        conn.execute("SELECT kb.release_job(%s, %s, %s)", (kb_id, job_id, worker_id))
        conn.execute(
            "UPDATE kb.job SET last_error = %s WHERE kb_id = %s AND id = %s",
            (why, kb_id, job_id),
        )
        log.error("job %s handed back, attempt not counted: %s", job_id, why)
        with self.stats.lock:
            self.stats.lacking_rights += 1
        # Every job would fail the same way: stop (--once), or wait before claiming again.
        if self.once:
            self.stop()
        else:
            self.stop_event.wait(RIGHTS_BACKOFF_S)

    def _report(
        self,
        outcome: Outcome,
        job_id: int,
        kb: str,
        title: str,
        seconds: float,
        error: str | None,
    ) -> None:
        where = f"{kb} / {title}"
        match outcome:
            case Outcome.DONE:
                self.stats.add("done", seconds)
                log.info("job %s done in %.2fs: %s", job_id, seconds, where)
            case Outcome.MORE:
                log.info("job %s paused after %.2fs (stopping): %s", job_id, seconds, where)
            case Outcome.RETRY:
                self.stats.add("retried", seconds)
                log.warning(
                    "job %s failed after %.2fs (will retry): %s: %s", job_id, seconds, where, error
                )
            case Outcome.FAILED:
                self.stats.add("failed", seconds)
                log.error(
                    "job %s failed for good after %.2fs: %s: %s", job_id, seconds, where, error
                )
            case Outcome.LOST:
                self.stats.add("lost", seconds)
                log.warning(
                    "job %s was taken over by another worker after %.2fs: %s",
                    job_id,
                    seconds,
                    where,
                )
            case Outcome.CANCELLED | Outcome.SUPERSEDED:
                self.stats.add("skipped", seconds)
                log.info("job %s %s after %.2fs: %s", job_id, outcome.value, seconds, where)
