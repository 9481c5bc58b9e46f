"""Loopback servers for the deployment tests: free ports, waiting for readiness."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cluster_ports(count: int) -> list[int]:
    """Ports P with P and P + 10000 both free (the cluster bus), distinct from each other."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port + 10000 < 65536 and port not in ports and _port_free(port + 10000):
            ports.append(port)
    return ports


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (redis.ConnectionError, OSError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def cluster_info(port: int) -> bytes:
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        reply = client.execute_command("CLUSTER", "INFO")
    finally:
        client.close()
    return reply if isinstance(reply, bytes) else str(reply).encode()


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_server(cli: str, port: int, pidfile: Path) -> None:
    """SHUTDOWN NOSAVE, then SIGTERM to the pid it wrote if it is still running after 5 s."""
    pid = int(pidfile.read_text()) if pidfile.exists() else None
    subprocess.run([cli, "-p", str(port), "shutdown", "nosave"], timeout=30, capture_output=True)
    if pid is None:
        return
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
