"""Private servers on this machine, for the demo, the tests and the benchmarks: one way to start them.

* ``ports``: free loopback ports (and pairs for a Redis Cluster's bus);
* ``processes``: waiting until a server answers, and making sure what was started dies with its
  starter (a parent-death signal, or a watchdog for servers that daemonize);
* ``redis_server``: one ``redis-server`` (``PrivateRedis``) and a Redis Cluster of a few masters
  (``PrivateRedisCluster``);
* ``postgres_server``: a PostgreSQL cluster of its own (``PrivatePostgres``);
* ``databases``: creating and dropping one named database on a PostgreSQL server.

Each helper touches only what it started or created: a server by its own process or data
directory, a database by its exact name. Nothing here is used by the worker itself.
"""

from __future__ import annotations


class ServerStartError(RuntimeError):
    """A private server could not be started (its message says which and why)."""


class MissingBinaryError(ServerStartError):
    """The server's program is not installed."""
