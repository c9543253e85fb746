"""Conversion in a child process with memory and CPU limits: a bad file costs that
process, never the PostgreSQL backend that asked."""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from dataclasses import asdict
from typing import Any

from kbpg_db.convert.base import Converted, ConvertError, Limits

# ---------------------------------------------------------------------------- isolation


# The child's first lines. It sets its own limits: a ``preexec_fn`` runs Python between
# fork and exec, where a lock another thread of the parent held at the fork (the import
# lock, malloc's, onnxruntime's in a backend) is never released and the child hangs.
# Whatever it dies of, it writes its peak address space to stderr first, so that an
# allocation refused near the limit reads as memory even where a C extension reports it
# as something else (SystemError, ImportError, a bare failure).
_CHILD = """\
import resource, sys
_soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
_mem = {memory}
if _hard != resource.RLIM_INFINITY:
    _mem = min(_mem, _hard)
# The soft limit only: the child may lift it for Chromium, which has its own timeout.
resource.setrlimit(resource.RLIMIT_AS, (_mem, _hard))
resource.setrlimit(resource.RLIMIT_CPU, ({cpu}, {cpu} + 5))
sys.path[:0] = {path!r}
def _hook(*exc):
    try:
        with open("/proc/self/status") as status:
            sys.stderr.write("\\n" + "".join(x for x in status if x.startswith("VmPeak:")))
    except OSError:
        pass
    sys.__excepthook__(*exc)
sys.excepthook = _hook
from kbpg_db import convert
convert.main()
"""


# What running out of memory reads like, from Python, a C library or a loader.
_OUT_OF_MEMORY = re.compile(
    r"MemoryError|[Cc]annot allocate|failed to map|bad_alloc|[Mm]emory allocation"
)


def _peak_kb() -> int | None:
    """This process's peak address space in kB (Linux), or None where unknown."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _near_limit(peak_kb: int | None, memory_mb: int) -> bool:
    """Whether a process that peaked at ``peak_kb`` was within reach of its limit: a
    failure there is a refused allocation, whatever name the library gave it."""
    return peak_kb is not None and peak_kb >= memory_mb * 1024 * 0.85


def _child_code(limits: Limits, path: list[str]) -> str:
    return _CHILD.format(
        memory=limits.memory_mb * 1024 * 1024, cpu=int(limits.timeout_s) + 1, path=path
    )


def run_isolated(
    request: dict[str, Any],
    data: bytes | None,
    limits: Limits,
    python: str | None = None,
    path: list[str] | None = None,
) -> Converted:
    """Convert (or fetch and convert, for ``request["url"]``) in a child process of
    ``python`` limited to ``limits.memory_mb`` of address space and ``timeout_s`` of
    time. The child imports from ``path`` (default: this process's sys.path, where this
    module was found)."""
    import signal
    import subprocess
    import tempfile

    python = python or sys.executable
    path = [p for p in (path or sys.path) if p]
    header = json.dumps({**request, "limits": asdict(limits)}).encode() + b"\n"
    with tempfile.TemporaryDirectory(prefix="kbpg-convert-") as home:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": home,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
        }
        proc = subprocess.Popen(
            [python, "-I", "-c", _child_code(limits, path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=home,
            start_new_session=True,  # its own process group: a timeout kills all it started
        )
        try:
            out, err = proc.communicate(header + (data or b""), timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ConvertError(
                f"took longer than {limits.timeout_s:g} s to convert and was stopped",
                hint="raise kb.convert_timeout_s if the file is genuine",
            ) from None
    if proc.returncode != 0 or not out:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        if proc.returncode < 0:
            sig = signal.Signals(-proc.returncode).name
            raise ConvertError(
                f"could not be converted: the converter was stopped by {sig} (over its "
                f"{limits.memory_mb} MB memory or CPU limit, or a parser crashed) {tail[0]}".rstrip(),
                hint="raise kb.convert_memory_mb if the file is genuine",
            )
        # Out of memory shows many ways (MemoryError, a library that cannot be mapped, a
        # C extension's SystemError), so the child's peak address space decides as well.
        text = err.decode("utf-8", "replace")
        peak = re.search(r"VmPeak:\s+(\d+) kB", text)
        if _OUT_OF_MEMORY.search(text) or (
            peak and _near_limit(int(peak.group(1)), limits.memory_mb)
        ):
            raise ConvertError(
                f"could not be converted: the converter process ran out of its "
                f"{limits.memory_mb} MB memory limit ({tail[0]})",
                hint="raise kb.convert_memory_mb if the file is genuine",
            )
        raise ConvertError(f"could not be converted: the converter process failed ({tail[0]})")
    try:
        result = json.loads(out)
    except ValueError:
        raise ConvertError(
            "could not be converted: the converter's reply is not readable ("
            + out[:200].decode("utf-8", "replace").strip()
            + ")"
        ) from None
    if not isinstance(result, dict) or "ok" not in result:
        raise ConvertError("could not be converted: the converter's reply is not readable")
    if not result.get("ok"):
        raise ConvertError(result["error"], result.get("hint"), result.get("status"))
    file = base64.b64decode(result["file"]) if result.get("file") else None
    return Converted(
        result["content"],
        result["format"],
        result.get("page_starts"),
        result.get("meta") or {},
        file,
        result.get("file_name"),
    )


def main() -> None:
    """The child's side: a JSON header line, then the file's bytes, on stdin; the result
    as one JSON object on stdout. Nothing else reaches stdout: what the libraries print
    (MuPDF writes its errors there) goes to stderr instead."""
    from kbpg_db.convert import convert

    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.setrecursionlimit(5000)
    raw = sys.stdin.buffer.read()
    line, _, data = raw.partition(b"\n")
    req = json.loads(line)
    limits = Limits(**req.pop("limits"))
    try:
        if req.get("url"):
            from kbpg_db import fetch

            out = fetch.fetch_and_convert(
                req["url"], limits, req.get("render", True), req.get("validators")
            )
        else:
            out = convert(data, req["file_name"], limits)
    except ConvertError as exc:
        result: dict[str, Any] = {
            "ok": False,
            "error": str(exc),
            "hint": exc.hint,
            "status": exc.status,
        }
        if _near_limit(_peak_kb(), limits.memory_mb) or _OUT_OF_MEMORY.search(str(exc)):
            # A parser that could not allocate often reports a damaged file instead.
            result["error"] += f" (the converter ran into its {limits.memory_mb} MB memory limit)"
            result["hint"] = "raise kb.convert_memory_mb if the file is genuine"
    except MemoryError:
        result = {
            "ok": False,
            "error": "could not be converted within the converter's "
            f"{limits.memory_mb} MB memory limit",
            "hint": "raise kb.convert_memory_mb if the file is genuine",
        }
    except RecursionError:
        result = {"ok": False, "error": "is nested too deeply to convert"}
    else:
        result = {
            "ok": True,
            "content": out.content,
            "format": out.format,
            "page_starts": out.page_starts,
            "meta": out.meta,
            "file": base64.b64encode(out.file).decode() if out.file else None,
            "file_name": out.file_name,
        }
    sys.stdout.flush()
    with os.fdopen(result_fd, "w", encoding="utf-8") as reply:
        reply.write(json.dumps(result))
