"""The embedded PostgreSQL cluster: a project-local server under ``$KBPG_HOME``.

Postgres refuses to run as root, so when we are root every server command runs as the
``postgres`` OS user (``runuser``), and the folders it writes are handed to that user.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kbpg.errors import ClusterError

SERVER_USER = "postgres"
DEFAULT_DB = "kbpg"


def is_root() -> bool:
    return os.geteuid() == 0


def find_bindir() -> Path:
    """The PostgreSQL server binaries: ``KBPG_PG_BINDIR``, else the newest Debian install."""
    override = os.environ.get("KBPG_PG_BINDIR")
    if override:
        return Path(override)
    candidates = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if candidates:
        return candidates[-1]
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    raise ClusterError(
        "no PostgreSQL server binaries found",
        hint="run `make setup`, or set KBPG_PG_BINDIR to the folder holding initdb and pg_ctl",
    )


def server_python_path() -> str:
    """Where `kbpg server-setup` puts the PL/Python dependencies for the server's Python."""
    override = os.environ.get("KBPG_PLPYTHON_DEPS")
    if override:
        return override
    out = subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    version = out.stdout.strip() or "3"
    return f"/usr/local/lib/kbpg/python{version}"


def _server_can_enter(path: Path) -> bool:
    if not is_root():
        return True
    return (
        subprocess.run(
            ["runuser", "-u", SERVER_USER, "--", "test", "-x", str(path)], check=False
        ).returncode
        == 0
    )


def default_home() -> Path:
    """``$KBPG_HOME``, else ``./.kbpg``; as root, a folder the server user can reach."""
    env = os.environ.get("KBPG_HOME")
    if env:
        return Path(env).resolve()
    home = (Path.cwd() / ".kbpg").resolve()
    if is_root() and not _server_can_enter(home.parent):
        # The checkout lies where the postgres user cannot enter: keep the data elsewhere.
        digest = hashlib.sha1(str(home).encode()).hexdigest()[:10]
        return Path("/var/lib/kbpg") / digest
    return home


def _server_env() -> dict[str, str]:
    """The environment for server commands: the caller's PG* settings would misdirect them."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A PostgreSQL cluster in ``home``: data/, run/ (socket), log/, plpython/."""

    home: Path
    settings: dict[str, str] = field(default_factory=dict)
    dbname: str = DEFAULT_DB

    @classmethod
    def default(cls) -> Cluster:
        return cls(default_home())

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def log_file(self) -> Path:
        return self.home / "log" / "postgres.log"

    @property
    def plpython_dir(self) -> Path:
        return self.home / "plpython"

    @property
    def bindir(self) -> Path:
        return find_bindir()

    # --- running commands as the server user -------------------------------------------
    def _run(self, args: list[str | Path], check: bool = True, timeout: float = 120) -> str:
        cmd = [str(a) for a in args]
        if is_root():
            cmd = ["runuser", "-u", SERVER_USER, "--", *cmd]
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            cwd="/",
            timeout=timeout,
            check=False,
            env=_server_env(),
        )
        if check and proc.returncode != 0:
            raise ClusterError(
                f"{Path(args[0]).name} failed (exit {proc.returncode})",
                detail=(proc.stderr or proc.stdout).strip()[-2000:],
                hint=f"server log: {self.log_file}",
            )
        return proc.stdout

    def _own(self, *paths: Path) -> None:
        if not is_root():
            return
        pw = pwd.getpwnam(SERVER_USER)
        for path in paths:
            for root, dirs, files in os.walk(path):
                os.chown(root, pw.pw_uid, pw.pw_gid)
                for name in dirs + files:
                    os.lchown(os.path.join(root, name), pw.pw_uid, pw.pw_gid)

    # --- lifecycle ----------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return (self.data / "PG_VERSION").exists()

    @property
    def port(self) -> int:
        conf = self.data / "kbpg.conf"
        if conf.exists():
            for line in conf.read_text().splitlines():
                if line.startswith("port"):
                    return int(line.split("=", 1)[1].strip().strip("'"))
        return int(os.environ.get("KBPG_PORT") or 5432)

    def init(self) -> None:
        """Create the cluster (first time only)."""
        if self.initialized:
            return
        self.home.mkdir(parents=True, exist_ok=True)
        if is_root():
            self.home.chmod(0o755)
        for d in (self.data, self.run_dir, self.log_file.parent, self.plpython_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.data.chmod(0o700)
        self._own(self.data, self.run_dir, self.log_file.parent)
        if not _server_can_enter(self.home):
            raise ClusterError(
                f"the {SERVER_USER} OS user cannot enter {self.home}",
                hint="set KBPG_HOME to a folder it can reach, e.g. /var/lib/kbpg/main",
            )
        self._run(
            [
                self.bindir / "initdb",
                "-D",
                self.data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-instructions",
            ]
        )
        port = int(os.environ.get("KBPG_PORT") or free_port())
        self.write_conf(port)

    def replicate(self, primary: Cluster) -> None:
        """Make this (new) cluster a hot standby of ``primary``: a base backup with
        streaming replication configured (pg_basebackup -R), on a port of its own. Start
        it with :meth:`start`; it serves every read of kbpg (search, explain, context,
        tree search, the lab's reads) and follows the primary's writes."""
        if self.initialized:
            raise ClusterError(f"{self.data} already holds a cluster")
        self.home.mkdir(parents=True, exist_ok=True)
        if is_root():
            self.home.chmod(0o755)
        for d in (self.run_dir, self.log_file.parent, self.plpython_dir):
            d.mkdir(parents=True, exist_ok=True)
        self._own(self.home)
        self._run(
            [
                self.bindir / "pg_basebackup",
                "-D",
                self.data,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "-h",
                primary.run_dir,
                "-p",
                str(primary.port),
                "-U",
                "postgres",
            ],
            timeout=600,
        )
        self.data.chmod(0o700)
        # A standby needs max_connections and the like at least as high as its primary's.
        self.settings = {**primary.settings, **self.settings}
        self.write_conf(int(os.environ.get("KBPG_REPLICA_PORT") or free_port()))

    def write_conf(self, port: int) -> None:
        conf = {
            "port": str(port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.run_dir}'",
            "kb.python_path": f"'{self.plpython_dir}:{server_python_path()}'",
            "shared_buffers": "'256MB'",
            "max_connections": "200",
            "logging_collector": "off",
        }
        conf.update(self.settings)
        body = "".join(f"{k} = {v}\n" for k, v in conf.items())
        (self.data / "kbpg.conf").write_text("# written by kbpg; edit with care\n" + body)
        main = self.data / "postgresql.conf"
        text = main.read_text()
        if "include_if_exists = 'kbpg.conf'" not in text:
            main.write_text(text + "\ninclude_if_exists = 'kbpg.conf'\n")
        self._own(self.data)

    def sync_plpython(self) -> None:
        """Copy the in-database package where the server can read it, in its release's
        folder (``releases/<version>/kbpg_db``, which kb.python_init loads)."""
        from kbpg_db import __version__

        from kbpg.resources import plpython_source

        legacy = self.plpython_dir / "kbpg_db"
        if legacy.exists():
            shutil.rmtree(legacy)
        self.install_release(plpython_source(), __version__)

    def install_release(self, package: Path, version: str) -> None:
        """Put a release's kbpg_db package (the folder ``package``) in
        ``releases/<version>/``, readable by the server's OS user."""
        target = self.plpython_dir / "releases" / version / "kbpg_db"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__"))
        for root, _dirs, files in os.walk(self.plpython_dir):
            os.chmod(root, 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)

    def running(self) -> bool:
        if not self.initialized:
            return False
        cmd = [str(self.bindir / "pg_ctl"), "status", "-D", str(self.data)]
        if is_root():
            cmd = ["runuser", "-u", SERVER_USER, "--", *cmd]
        return (
            subprocess.run(
                cmd, capture_output=True, cwd="/", check=False, env=_server_env()
            ).returncode
            == 0
        )

    def start(self) -> None:
        self.init()
        self.sync_plpython()
        if self.running():
            return
        # A stale socket lock from a crash stops the server from starting.
        for stale in self.run_dir.glob(".s.PGSQL.*"):
            stale.unlink(missing_ok=True)
        self._run(
            [
                self.bindir / "pg_ctl",
                "start",
                "-D",
                self.data,
                "-l",
                self.log_file,
                "-w",
                "-t",
                "60",
            ]
        )
        self.wait_ready()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = (
                subprocess.run(
                    [
                        str(self.bindir / "pg_isready"),
                        "-h",
                        str(self.run_dir),
                        "-p",
                        str(self.port),
                    ],
                    capture_output=True,
                    check=False,
                ).returncode
                == 0
            )
            if ok:
                return
            time.sleep(0.2)
        raise ClusterError("the server did not accept connections", hint=f"see {self.log_file}")

    def stop(self, mode: str = "fast") -> None:
        if self.running():
            self._run([self.bindir / "pg_ctl", "stop", "-D", self.data, "-m", mode, "-w"])

    def dsn(self, dbname: str | None = None) -> str:
        return f"host={self.run_dir} port={self.port} dbname={dbname or self.dbname} user=postgres"

    def ensure_database(self, dbname: str | None = None) -> None:
        import psycopg
        from psycopg import sql

        name = dbname or self.dbname
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
