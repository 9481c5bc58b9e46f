"""Private ``redis-server`` processes on free loopback ports: one server, or a small Redis Cluster.

A ``PrivateRedis`` runs in the foreground as a child of this process and gets the parent-death
signal, so it never outlives its starter. With ``appendonly`` (the default, as ``docker-compose.yml``
configures Redis) a restart keeps every stream, consumer group and pending entry.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from devtools.localservers import MissingBinaryError
from devtools.localservers.ports import cluster_ports, free_port
from devtools.localservers.processes import alive, die_with_parent, wait_for

# A server is not ready while it refuses connections or is still loading its append-only file.
NOT_READY = (redis.ConnectionError, redis.BusyLoadingError, OSError)


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise MissingBinaryError(f"{name} is not installed")
    return found


class PrivateRedis:
    """``redis-server`` on its own port, files under ``workdir``; ``restart`` is a clean stop and a
    start on the same port."""

    def __init__(
        self, workdir: Path, *, password: str | None = None, appendonly: bool = True
    ) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.password = password
        self.appendonly = appendonly
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def url(self, db: int = 0) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis.from_url(self.url(db), socket_timeout=30)

    def start(self, timeout: float = 20) -> None:
        """Start the server and return once it answers PING; ``ServerStartError`` otherwise."""
        argv = [
            _binary("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.dir), "--appendonly", "yes" if self.appendonly else "no",
            "--save", "", "--maxmemory", "0",
        ]  # fmt: skip
        if self.password:
            argv += ["--requirepass", self.password]
        with open(self.dir / "redis.log", "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )

        def answers() -> bool:
            client = self.client()
            try:
                return bool(client.ping())
            finally:
                client.close()

        wait_for(answers, timeout, f"the private redis-server on port {self.port}",
                 transient=NOT_READY)  # fmt: skip

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


class PrivateRedisCluster:
    """A Redis Cluster of ``masters`` masters (no replicas) on free loopback ports, files under
    ``workdir``. Each node daemonizes with a pidfile and is stopped by ``SHUTDOWN NOSAVE``, then by
    SIGTERM to the pid it wrote if it is still running."""

    def __init__(self, workdir: Path, masters: int = 3) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ports = cluster_ports(masters)
        self.started: list[int] = []

    def url(self) -> str:
        """The URL of one node; a cluster client finds the others from it."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def _pidfile(self, port: int) -> Path:
        return self.dir / f"redis-{port}.pid"

    def start(self) -> None:
        """Start every node, join them with ``redis-cli --cluster create`` and wait for
        ``cluster_state:ok`` on each. On an error the nodes already started keep running: ``stop``."""
        server, cli = _binary("redis-server"), _binary("redis-cli")
        for port in self.ports:
            subprocess.run(
                [
                    server, "--port", str(port), "--bind", "127.0.0.1",
                    "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                    "--save", "", "--appendonly", "no", "--daemonize", "yes",
                    "--dir", str(self.dir), "--logfile", str(self.dir / f"redis-{port}.log"),
                    "--pidfile", str(self._pidfile(port)),
                ],
                check=True, timeout=30,
            )  # fmt: skip
            self.started.append(port)
        for port in self.ports:
            wait_for(lambda p=port: _ping(p), 10, f"redis-server on {port}", transient=NOT_READY)
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, timeout=60, capture_output=True,
        )  # fmt: skip
        for port in self.ports:
            wait_for(
                lambda p=port: b"cluster_state:ok" in cluster_info(p),
                30,
                f"cluster_state:ok on {port}",
                transient=NOT_READY,
                every=0.1,
            )

    def stop(self) -> None:
        if not self.started:
            return
        cli = _binary("redis-cli")
        for port in self.started:
            stop_daemon(cli, port, self._pidfile(port))
        self.started.clear()


def _ping(port: int) -> bool:
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        return bool(client.ping())
    finally:
        client.close()


def cluster_info(port: int) -> bytes:
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        reply = client.execute_command("CLUSTER", "INFO")
    finally:
        client.close()
    return reply if isinstance(reply, bytes) else str(reply).encode()


def stop_daemon(cli: str, port: int, pidfile: Path) -> None:
    """SHUTDOWN NOSAVE, then SIGTERM to the pid it wrote if it is still running after 5 s."""
    pid = int(pidfile.read_text()) if pidfile.exists() else None
    subprocess.run([cli, "-p", str(port), "shutdown", "nosave"], timeout=30, capture_output=True)
    if pid is None:
        return
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
