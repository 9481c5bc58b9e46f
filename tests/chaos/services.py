"""Private Redis and PostgreSQL servers for the chaos tests, so a fault may restart them.

The shared servers on 6379 and 5432 serve other engineers' tests and are never touched here. Each
private server listens on a free loopback port, keeps its files under a temporary directory, and is
stopped (only the process this module started) at the end.

Redis runs with append-only persistence, as ``docker-compose.yml`` configures it, so a restart keeps
every stream, consumer group and pending entry. PostgreSQL runs from the version 15 binaries as the
``postgres`` OS user, with ``fsync=off`` (speed: a restart kills the server processes, not the machine,
so the kernel still holds every committed page) and ``synchronous_commit=on`` (a commit is durable in
the server's eyes before the worker acknowledges anything, which is what the pipeline relies on).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from sqlalchemy import text

from worker.ledger.database import make_engine, upgrade

from .fleet import die_with_parent

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """``redis-server`` on its own port with AOF; ``restart`` is a clean SHUTDOWN and a start."""

    def __init__(self, workdir: Path, *, password: str | None = None) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.password = password
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def url(self, db: int = 0) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis.from_url(self.url(db), socket_timeout=30)

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        argv = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            "--appendonly", "yes", "--save", "", "--maxmemory", "0",
        ]  # fmt: skip
        if self.password:
            argv += ["--requirepass", self.password]
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - lives as long as the server
        self.proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.client().ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
            except redis.BusyLoadingError:
                time.sleep(0.05)
        raise RuntimeError(f"private redis-server on port {self.port} did not start")

    def stop(self) -> None:
        """SIGTERM: Redis flushes the append-only file and exits (what ``SHUTDOWN`` does)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self, down_seconds: float = 1.0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1


def _as_postgres(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", *argv],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )


def reap_on_exit(argv: list[str]) -> subprocess.Popen[bytes]:
    """A watchdog process that runs ``argv`` when this process dies, however it dies: it waits for
    the end of a pipe only this process holds open. For servers that daemonize (``pg_ctl``), which a
    parent-death signal cannot reach. Kill the watchdog to stand it down."""
    code = "import subprocess, sys; sys.stdin.buffer.read(); subprocess.run(sys.argv[1:])"
    return subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


class PrivatePostgres:
    """A PostgreSQL 15 cluster of our own; ``restart`` may be ``fast`` or ``immediate`` (a crash)."""

    def __init__(self) -> None:
        # Under /tmp itself: the postgres user cannot enter pytest's root-only temporary directories.
        self.home = Path(tempfile.mkdtemp(prefix="chaos-pg-"))
        self.dir = self.home / "data"
        self.port = free_port()
        self.restarts = 0
        self.reaper: subprocess.Popen[bytes] | None = None

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        auth = f"postgres:{password}" if password else "postgres"
        return f"postgresql+psycopg://{auth}@127.0.0.1:{self.port}/{database}"

    def _options(self) -> str:
        return (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c full_page_writes=off -c max_connections=200"
        )

    def start(self) -> None:
        if not (self.dir / "PG_VERSION").exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(self.dir.parent, "postgres", "postgres")
            os.chmod(self.dir, 0o700)
            _as_postgres(
                str(PG_BIN / "initdb"), "-D", str(self.dir), "-A", "trust", "-U", "postgres"
            )
        _as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.dir), "-l", str(self.dir / "server.log"),
            "-o", self._options(), "-w", "start",
        )  # fmt: skip
        if self.reaper is None:
            self.reaper = reap_on_exit(
                ["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(self.dir),
                 "-m", "immediate", "-w", "stop"]
            )  # fmt: skip

    def restart(self, mode: str = "fast") -> None:
        _as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.dir), "-l", str(self.dir / "server.log"),
            "-m", mode, "-o", self._options(), "-w", "restart",
        )  # fmt: skip
        self.restarts += 1

    def stop(self) -> None:
        """Stop this cluster (only ours, by its data directory) and remove its files."""
        if self.reaper is not None:
            self.reaper.kill()
            self.reaper.wait()
            self.reaper = None
        if (self.dir / "postmaster.pid").exists():
            _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.dir), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.home, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """A fresh, migrated ledger database; returns its URL."""
        admin = make_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        url = self.url(name)
        upgrade(url)
        return url
