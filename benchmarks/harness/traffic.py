"""One client's own Redis traffic: the commands it sends (by name) and the bytes it sends and
receives, counted inside the client.

The Redis server is shared with other work, so its own counters (``INFO commandstats``,
``total_net_input_bytes``) mix everyone's traffic in; these are exact for the client they count.
A connection's set-up commands (``CLIENT SETINFO``) and health-check ``PING``s count too, as they
cross the wire.
"""

from __future__ import annotations

import socket
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis


@dataclass
class Traffic:
    commands: Counter[str] = field(default_factory=Counter)
    sent: int = 0
    received: int = 0

    def snapshot(self) -> Traffic:
        return Traffic(Counter(self.commands), self.sent, self.received)

    def since(self, earlier: Traffic) -> Traffic:
        return Traffic(self.commands - earlier.commands, self.sent - earlier.sent,
                       self.received - earlier.received)  # fmt: skip

    @property
    def total(self) -> int:
        return sum(self.commands.values())


class _CountingPacker:
    """Wraps a connection's command packer: every command of a pipeline goes through ``pack``."""

    def __init__(self, inner: Any, traffic: Traffic) -> None:
        self.inner = inner
        self.traffic = traffic

    def pack(self, *args: Any) -> list[bytes]:
        name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        self.traffic.commands[name.upper()] += 1
        chunks = self.inner.pack(*args)
        self.traffic.sent += sum(len(chunk) for chunk in chunks)
        return chunks


class _CountingSocket:
    """A socket whose reads are counted; everything else is the socket's own."""

    def __init__(self, sock: socket.socket, traffic: Traffic) -> None:
        self._sock = sock
        self._traffic = traffic

    def recv(self, size: int, *args: Any) -> bytes:
        data = self._sock.recv(size, *args)
        self._traffic.received += len(data)
        return data

    def recv_into(self, buffer: Any, *args: Any) -> int:
        count = self._sock.recv_into(buffer, *args)
        self._traffic.received += count
        return count

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _CountingConnection(redis.Connection):
    traffic: Traffic

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._command_packer = _CountingPacker(self._command_packer, self.traffic)

    def _connect(self) -> Any:
        return _CountingSocket(super()._connect(), self.traffic)


def counting_client(url: str, traffic: Traffic) -> redis.Redis:
    """A client as ``worker.consumer.runtime.redis_client`` builds one (single node), counting
    its traffic into ``traffic``."""
    connection = type("CountedConnection", (_CountingConnection,), {"traffic": traffic})
    pool = redis.ConnectionPool.from_url(
        url,
        connection_class=connection,
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
    )
    return redis.Redis(connection_pool=pool)
