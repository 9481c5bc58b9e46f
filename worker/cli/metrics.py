"""``billing metrics serve``: the Prometheus endpoint for every worker process of this host.

This module imports ``worker.metrics`` only inside the command, because that import fixes where the
metric values live (see ``prepare_multiprocess_dir``).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path

import click

from worker.cli import main

DEFAULT_WORKER_DIR = Path("var") / "prometheus"


def prepare_multiprocess_dir(default: Path = DEFAULT_WORKER_DIR) -> Path:
    """For ``billing worker``: use ``PROMETHEUS_MULTIPROC_DIR`` (default ``./var/prometheus``), emptied.

    Must run before ``worker.metrics`` is imported. Emptying matters: files left by an earlier run
    hold its counters, and the exporter would add them to the new ones. Do not call it while other
    workers share the directory (several containers on one volume): their counters would restart.
    """
    path = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or default)
    if path.exists():
        for child in path.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path.resolve())
    return path


@main.group("metrics")
def metrics_group() -> None:
    """Prometheus metrics of the worker processes."""


@metrics_group.command("serve")
@click.option("--port", default=9100, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--backlog/--no-backlog",
    default=True,
    show_default=True,
    help="Read consumer lag, pending entries and dead letters from Redis at each scrape.",
)
def serve_command(port: int, host: str, backlog: bool) -> None:
    """Serve /metrics until stopped: the files in PROMETHEUS_MULTIPROC_DIR, plus the backlog."""
    from worker.cli.db import fail, settings

    config = settings("metrics serve")
    directory = config.metrics_dir
    # The exporter reads the directory and never writes to it: its own metrics stay in memory.
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)

    from prometheus_client import start_http_server

    from worker import metrics
    from worker.config import redact_url
    from worker.pipeline.keys import Keys
    from worker.pipeline.runtime import redis_client

    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
    collector = None
    if backlog:
        try:  # a cluster client connects at once to discover the masters
            client = redis_client(config.redis_url, cluster=config.redis_cluster)
        except Exception as exc:
            fail("metrics serve", f"{redact_url(config.redis_url)}: {exc}")
        collector = metrics.BacklogCollector(client, Keys(config.prefix, config.partitions))
    registry = metrics.exporter_registry(directory, collector)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        fail("metrics serve", f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    source = (
        f"every process writing to {directory}"
        if directory
        else "this process only (PROMETHEUS_MULTIPROC_DIR is not set)"
    )
    if backlog:
        source += f"; backlog from {redact_url(config.redis_url)}"
    click.echo(f"serving http://{host}:{server.server_port}/metrics: {source}", err=True)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
