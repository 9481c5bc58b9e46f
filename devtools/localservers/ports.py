"""Free loopback ports, as the kernel hands them out (bind to port 0)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (another process may take it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(count: int) -> list[int]:
    """Ports P with P and P + 10000 both free (a Redis Cluster node's bus), distinct from each other."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port + 10000 < 65536 and port not in ports and port_free(port + 10000):
            ports.append(port)
    return ports
