"""Fixtures for the deployment tests: a private Redis Cluster.

The cluster is three masters started with the installed ``redis-server`` on free loopback ports (each
needs its port and port + 10000 for the cluster bus), joined with ``redis-cli --cluster create``, and
shut down afterwards (``devtools.localservers.redis_server.PrivateRedisCluster``). Without the binaries
the cluster tests fail: a skipped test would hide a gap.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.localservers import MissingBinaryError
from devtools.localservers.redis_server import PrivateRedisCluster


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of one node of a fresh 3-master Redis Cluster on loopback."""
    cluster = PrivateRedisCluster(tmp_path_factory.mktemp("cluster"), masters=3)
    try:
        try:
            cluster.start()
        except MissingBinaryError as exc:
            pytest.fail(f"redis-server and redis-cli are needed for the cluster tests: {exc}")
        yield cluster.url()
    finally:
        cluster.stop()
