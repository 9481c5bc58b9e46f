"""Fixtures for the deployment tests: free loopback ports, a private Redis Cluster, a unique prefix.

The cluster is three masters started with the installed ``redis-server`` on free loopback ports (each
needs its port and port + 10000 for the cluster bus), joined with ``redis-cli --cluster create``, and
shut down afterwards. Without the binaries the cluster tests are skipped.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from .servers import cluster_info, cluster_ports, stop_server, wait_for


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of one node of a fresh 3-master Redis Cluster on loopback."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if not server or not cli:
        pytest.fail("redis-server and redis-cli are needed for the cluster tests")
    workdir: Path = tmp_path_factory.mktemp("cluster")
    ports = cluster_ports(3)
    started: list[int] = []
    try:
        for port in ports:
            subprocess.run(
                [
                    server, "--port", str(port), "--bind", "127.0.0.1",
                    "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                    "--save", "", "--appendonly", "no", "--daemonize", "yes",
                    "--dir", str(workdir), "--logfile", str(workdir / f"redis-{port}.log"),
                    "--pidfile", str(workdir / f"redis-{port}.pid"),
                ],
                check=True, timeout=30,
            )  # fmt: skip
            started.append(port)
        for port in ports:
            wait_for(lambda p=port: redis.Redis(port=p).ping(), 10, f"redis-server on {port}")
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, timeout=60, capture_output=True,
        )  # fmt: skip
        for port in ports:
            wait_for(
                lambda p=port: b"cluster_state:ok" in cluster_info(p),
                30,
                f"cluster_state:ok on {port}",
            )
        yield f"redis://127.0.0.1:{ports[0]}/0"
    finally:
        for port in started:
            stop_server(cli, port, workdir / f"redis-{port}.pid")
