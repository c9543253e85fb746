"""The local embedding model for queries, in one process per PostgreSQL server.

Loaded in a backend, the default model costs that backend about 130 MB of private memory
and half a second on its first search; a pool of connections pays that on each of them.
Instead, a backend that embeds a query asks the server's embedding process over a Unix
socket, and starts that process when it is not running. The model is then loaded once
per server, not once per connection.

- The socket and its lock live in the data directory's ``pg_stat_tmp`` (where a backend's
  working directory is; PostgreSQL's own base backups leave that folder's files out),
  readable by the server's OS user only, and are named by kbpg's release: after an
  upgrade the new release starts its own process and the old one leaves when idle.
- The process leaves after ``IDLE_EXIT_S`` without a request, and as soon as the server's
  postmaster is gone.
- Where it cannot be reached or started (``kb.embed_service = off``, a read-only data
  directory, a crash), the backend embeds in its own process as before: a search never
  fails for want of it.

This module imports only the standard library: a backend that asks the process loads
neither onnxruntime nor the model.
"""

from __future__ import annotations

import array
import json
import os
import socket
import struct
import subprocess
import sys
import time
from typing import Any

from kbpg_db import __version__

FOLDER = "pg_stat_tmp"
IDLE_EXIT_S = 600.0
START_WAIT_S = 5.0
# After a failed start, backends embed in-process for this long before trying again.
RETRY_AFTER_S = 60.0
# A query's vector takes milliseconds; a process that has not answered in this long is
# taken for stuck, and the backend embeds itself.
REPLY_TIMEOUT_S = 30.0
_HEADER = struct.Struct("!I")
_MAX_MESSAGE = 64 * 1024 * 1024

_failed_at: float | None = None


def _name(kind: str) -> str:
    return os.path.join(FOLDER, f"kbpg_embed-{__version__}.{kind}")


def enabled() -> bool:
    """Whether queries use the embedding process (``kb.embed_service``, default on)."""
    return os.environ.get("KBPG_EMBED_SERVICE", "on").lower() not in ("off", "false", "0")


# ---------------------------------------------------------------------------- the client


def embed_queries(texts: list[str], threads: int = 0) -> list[list[float]] | None:
    """The default local model's vectors for ``texts`` from the server's embedding
    process, started when it is not running; None where it cannot be used (the caller
    then embeds in its own process)."""
    global _failed_at
    if not enabled() or not os.path.isdir(FOLDER):
        return None
    if _failed_at is not None and time.monotonic() - _failed_at < RETRY_AFTER_S:
        return None
    try:
        conn = _connect()
        if conn is None:
            if not _running():
                _start(threads)
            deadline = time.monotonic() + START_WAIT_S
            while conn is None and time.monotonic() < deadline:
                time.sleep(0.02)
                conn = _connect()
        if conn is None:
            _failed_at = time.monotonic()
            return None
        with conn:
            conn.settimeout(REPLY_TIMEOUT_S)
            _send(conn, json.dumps({"texts": texts}).encode())
            head = json.loads(_receive(conn))
            if not head.get("ok"):
                raise OSError(head.get("error") or "the embedding process failed")
            raw = _receive(conn)
    except (OSError, ValueError, subprocess.SubprocessError):
        _failed_at = time.monotonic()
        return None
    _failed_at = None
    floats = array.array("f")
    floats.frombytes(raw)
    if sys.byteorder != "little":
        floats.byteswap()
    dim = int(head["dimensions"])
    values = floats.tolist()
    return [values[i * dim : (i + 1) * dim] for i in range(len(texts))]


def _connect() -> socket.socket | None:
    path = _name("sock")
    try:
        # Only a socket of this server's OS user is trusted with its queries.
        if os.stat(path).st_uid != os.getuid():
            return None
    except OSError:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(2.0)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return None
    return conn


def _running() -> bool:
    """Whether an embedding process holds the lock (it may still be loading the model):
    backends that find one wait for its socket instead of starting another."""
    import fcntl

    try:
        with open(_name("lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def _start(threads: int) -> None:
    """Start the embedding process, detached (it forks and its first process exits at
    once, so no backend is left with a child to wait for)."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "KBPG_ONNX_THREADS": str(threads),
    }
    for name in ("KBPG_MINILM_TOKENIZER", "KBPG_MINILM_GRAPH"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    code = (
        f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
        "from kbpg_db import embedservice; embedservice.main()"
    )
    with open(_name("log"), "ab") as log:
        proc = subprocess.Popen(
            [_python(), "-I", "-c", code],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            close_fds=True,
            start_new_session=True,
        )
    proc.wait(timeout=30)


def _python() -> str:
    """The interpreter PL/Python runs (sys.executable is the postgres binary there)."""
    exe = sys.executable
    if os.path.basename(exe).startswith("python"):
        return exe
    return f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"


def _send(conn: socket.socket, data: bytes) -> None:
    conn.sendall(_HEADER.pack(len(data)) + data)


def _receive(conn: socket.socket) -> bytes:
    size = _HEADER.unpack(_exactly(conn, _HEADER.size))[0]
    if size > _MAX_MESSAGE:
        raise ValueError(f"a message of {size} bytes")
    return _exactly(conn, size)


def _exactly(conn: socket.socket, n: int) -> bytes:
    parts = []
    while n:
        part = conn.recv(min(n, 1 << 20))
        if not part:
            raise OSError("the embedding process closed the connection")
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


# ---------------------------------------------------------------------------- the process


def main() -> None:
    """The embedding process: detach, hold the lock (one process per server and release),
    load the model, answer until idle or the postmaster is gone."""
    import fcntl

    if os.fork():
        os._exit(0)  # the launcher returns; the process lives on, detached
    lock = open(_name("lock"), "a")  # held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another process serves
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")  # for status(); the lock, not the file, says it runs
    lock.flush()
    postmaster = _postmaster_pid()
    from kbpg_db import embedding

    model = embedding.local_model()
    model.embed(["warm up"])
    path = _name("sock")
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        server.bind(path)
    finally:
        os.umask(old)
    bound = os.stat(path).st_ino
    server.listen(128)
    server.settimeout(5.0)
    _log(f"serving {embedding.LOCAL_MODEL} for queries (pid {os.getpid()})")
    last = time.monotonic()
    try:
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                if time.monotonic() - last > IDLE_EXIT_S:
                    _log("idle: leaving")
                    return
                if postmaster is not None and not _alive(postmaster):
                    _log("the postmaster is gone: leaving")
                    return
                continue
            last = time.monotonic()
            _spawn(conn, model)
    finally:
        try:
            if os.stat(path).st_ino == bound:  # not a newer process's socket
                os.unlink(path)
        except OSError:
            pass
        server.close()


def _spawn(conn: socket.socket, model: Any) -> None:
    import threading

    threading.Thread(target=_answer, args=(conn, model), daemon=True).start()


def _answer(conn: socket.socket, model: Any) -> None:
    with conn:
        conn.settimeout(60.0)
        try:
            request = json.loads(_receive(conn))
            texts = request["texts"]
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ValueError("texts must be a list of strings")
            vectors = model.embed(texts)
        except Exception as exc:  # the backend embeds in-process then
            try:
                _send(conn, json.dumps({"ok": False, "error": str(exc)}).encode())
            except OSError:
                pass
            return
        try:
            _send(conn, json.dumps({"ok": True, "dimensions": model.dimensions}).encode())
            _send(conn, vectors.astype("<f4").tobytes())
        except OSError:
            pass


def status() -> dict[str, Any]:
    """The embedding process of this server and release, as kb.embedding_process reports
    it: whether it runs, its pid and private memory, and the last line of its log."""
    out: dict[str, Any] = {
        "enabled": enabled(),
        "running": _running(),
        "pid": None,
        "private_mb": None,
        "socket": _name("sock"),
        "last_log": None,
    }
    if out["running"]:
        try:
            with open(_name("lock")) as f:
                pid = int(f.readline())
            out["pid"], out["private_mb"] = pid, round(private_mb(pid), 1)
        except (OSError, ValueError):
            pass
    try:
        with open(_name("log"), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
        out["last_log"] = lines[-1] if lines else None
    except OSError:
        pass
    return out


def private_mb(pid: int) -> float:
    """A process's private memory (its own pages, clean and dirty; shared libraries,
    shared buffers and pages shared with its parent left out), in MB (Linux)."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total / 1024


def _postmaster_pid() -> int | None:
    try:
        with open("postmaster.pid") as f:
            return int(f.readline())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return os.path.exists("postmaster.pid")


def _log(message: str) -> None:
    print(time.strftime("%Y-%m-%d %H:%M:%S"), "kbpg embedding process:", message, flush=True)
