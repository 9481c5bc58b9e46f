"""A PostgreSQL cluster of its own (``PrivatePostgres``): its own data directory, a free loopback port.

It runs from the version 15 binaries as the ``postgres`` OS user (``runuser``: the starter is root),
with ``fsync=off`` (speed: a restart kills the server processes, not the machine, so the kernel still
holds every committed page) and ``synchronous_commit=on`` (a commit is durable in the server's eyes
before anyone acknowledges anything). ``pg_ctl`` daemonizes the server, so a watchdog
(``reap_on_exit``) stops it if the starter dies without calling ``stop``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from devtools.localservers.databases import create_database
from devtools.localservers.ports import free_port
from devtools.localservers.processes import reap_on_exit
from worker.ledger.database import upgrade

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _as_postgres(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", *argv],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )


class PrivatePostgres:
    """A PostgreSQL 15 cluster of our own; ``restart`` may be ``fast`` or ``immediate`` (a crash)."""

    def __init__(self, bin_dir: Path = PG_BIN) -> None:
        # Under /tmp itself: the postgres user cannot enter pytest's root-only temporary directories.
        self.home = Path(tempfile.mkdtemp(prefix="private-pg-"))
        self.dir = self.home / "data"
        self.bin = bin_dir
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

    def _pg_ctl(self, *argv: str) -> list[str]:
        return [str(self.bin / "pg_ctl"), "-D", str(self.dir), *argv]

    def start(self) -> None:
        if not (self.dir / "PG_VERSION").exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(self.dir.parent, "postgres", "postgres")
            os.chmod(self.dir, 0o700)
            _as_postgres(
                str(self.bin / "initdb"), "-D", str(self.dir), "-A", "trust", "-U", "postgres"
            )
        _as_postgres(
            *self._pg_ctl("-l", str(self.dir / "server.log"), "-o", self._options(), "-w", "start")
        )
        if self.reaper is None:
            self.reaper = reap_on_exit(
                ["runuser", "-u", "postgres", "--", *self._pg_ctl("-m", "immediate", "-w", "stop")]
            )

    def restart(self, mode: str = "fast") -> None:
        _as_postgres(
            *self._pg_ctl(
                "-l", str(self.dir / "server.log"), "-m", mode, "-o", self._options(), "-w",
                "restart",
            )
        )  # fmt: skip
        self.restarts += 1

    def stop(self) -> None:
        """Stop this cluster (only ours, by its data directory) and remove its files."""
        if self.reaper is not None:
            self.reaper.kill()
            self.reaper.wait()
            self.reaper = None
        if (self.dir / "postmaster.pid").exists():
            _as_postgres(*self._pg_ctl("-m", "fast", "-w", "stop"))
        shutil.rmtree(self.home, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """A fresh ledger database migrated to head; returns its URL."""
        url = create_database(self.url(), name)
        upgrade(url)
        return url
