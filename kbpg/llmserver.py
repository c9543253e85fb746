"""A local OpenAI-compatible LLM server for offline use: llama.cpp through ``xllamacpp``.

``kbpg llm serve --model FILE.gguf`` serves the user's own GGUF model on 127.0.0.1; a KB
points at it with ``extra.api_base`` (``http://127.0.0.1:8431/v1``) and any model name
(``openai/local``). ``kbpg up --llm FILE.gguf`` starts it in the background beside the
embedded cluster (``kbpg down`` stops both). Nothing is downloaded: the model is a file
the user has. ``xllamacpp`` is an optional dependency (``pip install kbpg[llm]``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kbpg.errors import KbpgError

DEFAULT_PORT = 8431


def start(
    model: Path,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    threads: int = 2,
    ctx: int = 4096,
    parallel: int = 1,
) -> Any:
    """Start llama.cpp's server in this process; returns the running server."""
    try:
        import xllamacpp as xlc
    except ImportError:
        raise KbpgError(
            "kbpg llm serve needs the xllamacpp package",
            hint="pip install 'kbpg[llm]' (prebuilt wheels; nothing is compiled)",
        ) from None
    if not model.is_file():
        raise KbpgError(f"{model}: no such model file", hint="pass the path of a .gguf file")
    params = xlc.CommonParams()
    params.model.path = str(model)
    params.n_ctx = ctx
    params.n_parallel = parallel
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = [host]
    params.port = port
    return xlc.Server(params)


def wait_ready(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise KbpgError(f"the LLM server at {url} did not become ready in {timeout:.0f} s")


def serve(model: Path, host: str, port: int, threads: int, ctx: int, parallel: int) -> int:
    """Serve until SIGINT/SIGTERM."""
    server = start(model, host, port, threads, ctx, parallel)
    url = f"http://{host}:{port}"
    print(
        f"serving {model.name} at {url}/v1 (api_base for a KB: {url}/v1, model openai/local)",
        flush=True,
    )
    stop = False

    def handler(_signum: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    while not stop:
        time.sleep(0.5)
    del server
    return 0


def pid_file(home: Path) -> Path:
    return home / "run" / "llm.pid"


def start_background(home: Path, model: Path, port: int, threads: int) -> str:
    """``kbpg llm serve`` as a background process of the embedded setup."""
    url = f"http://127.0.0.1:{port}"
    log = home / "log" / "llm.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_file(home).parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kbpg.cli",
                "llm",
                "serve",
                "--model",
                str(model),
                "--port",
                str(port),
                "--threads",
                str(threads),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    pid_file(home).write_text(str(proc.pid))
    wait_ready(url)
    return url + "/v1"


def stop_background(home: Path) -> bool:
    path = pid_file(home)
    if not path.is_file():
        return False
    try:
        os.kill(int(path.read_text()), signal.SIGTERM)
    except (ProcessLookupError, ValueError):
        pass
    path.unlink(missing_ok=True)
    return True
