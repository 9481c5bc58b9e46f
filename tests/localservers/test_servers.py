"""The shared start-up helpers on their own: a private redis-server starts, keeps its data across a
restart when append-only, and is gone after ``stop``; a wait that never succeeds says what it waited
for; cluster ports leave room for the bus; the demo falls back to a private server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis

from devtools import demo
from devtools.localservers import ServerStartError
from devtools.localservers.ports import cluster_ports, free_port, port_free
from devtools.localservers.processes import alive, wait_for
from devtools.localservers.redis_server import PrivateRedis


def test_an_append_only_redis_keeps_its_keys_across_a_restart(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    try:
        server.client().set("kept", b"yes")
        first = server.proc
        server.restart(down_seconds=0)
        assert server.proc is not first and server.restarts == 1
        assert server.client().get("kept") == b"yes"
    finally:
        server.stop()
    assert server.proc is not None and not alive(server.proc.pid)
    assert port_free(server.port)


def test_a_password_is_required_once_set(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path / "redis", password="pw-1", appendonly=False)
    server.start()
    try:
        assert server.client().ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=server.port).ping()
    finally:
        server.stop()


def test_a_wait_that_never_succeeds_names_what_it_waited_for() -> None:
    def refuses() -> bool:
        raise ConnectionRefusedError

    with pytest.raises(ServerStartError, match="waiting for the moon"):
        wait_for(refuses, 0.2, "the moon")
    with pytest.raises(ValueError):  # an error that is not transient is not swallowed
        wait_for(lambda: int("x") > 0, 0.2, "a number")


def test_cluster_ports_leave_the_bus_port_free() -> None:
    ports = cluster_ports(3)
    assert len(set(ports)) == 3
    assert all(port_free(port) and port_free(port + 10000) for port in ports)
    assert 0 < free_port() < 65536


def test_the_demo_starts_a_private_redis_when_none_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setattr(demo, "WORKDIR", tmp_path)
    started: list[subprocess.Popen[bytes]] = []
    try:
        url = demo.find_redis(started)
        assert len(started) == 1
        assert redis.Redis.from_url(url).ping()
    finally:
        for proc in started:
            proc.terminate()
            proc.wait(timeout=10)
