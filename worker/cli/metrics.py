"""``billing metrics serve``: the Prometheus endpoint for every worker process of this host.

This module imports ``worker.metrics`` only inside the command, because that import fixes where the
metric values live (see ``prepare_multiprocess_dir``).
"""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path

import click

from worker.cli import main

DEFAULT_WORKER_DIR = Path("var") / "prometheus"

# The names prometheus_client gives its multiprocess files (``values.MultiProcessValue``):
# ``<type>_<process>.db``, gauges ``gauge_<mode>_<process>.db``; the process identifier is
# ``worker.metrics.process_identifier`` (a host name with ``_`` replaced, a dash, a pid) or a bare pid.
# The modes are ``Gauge._MULTIPROC_MODES``, spelled out: importing prometheus_client here would fix
# its value class before ``PROMETHEUS_MULTIPROC_DIR`` is settled (tests/deploy/test_metrics_dir.py
# checks the pattern against every file the installed version writes).
GAUGE_MODES = (
    "all", "liveall", "min", "livemin", "max", "livemax", "sum", "livesum", "mostrecent",
    "livemostrecent",
)  # fmt: skip
METRIC_FILE = re.compile(
    rf"(?:counter|histogram|summary|gauge_(?:{'|'.join(GAUGE_MODES)}))_[A-Za-z0-9.-]+\.db"
)


def is_metric_file(path: Path) -> bool:
    """A regular file named as prometheus_client names its multiprocess files."""
    return METRIC_FILE.fullmatch(path.name) is not None and path.is_file() and not path.is_symlink()


def prepare_multiprocess_dir(default: Path = DEFAULT_WORKER_DIR) -> Path:
    """For ``billing worker``: use ``PROMETHEUS_MULTIPROC_DIR`` (default ``./var/prometheus``), emptied
    of the metric files an earlier run left.

    Must run before ``worker.metrics`` is imported. Emptying matters: files left by an earlier run
    hold its counters, and the exporter would add them to the new ones. Only prometheus_client's own
    files are removed (``METRIC_FILE``); a directory holding anything else (a subdirectory, a ledger,
    a file of another program) raises ``ValueError`` and nothing in it is touched. Do not call it
    while other workers share the directory (several containers on one volume): their counters
    would restart.
    """
    path = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or default)
    if path.exists() and not path.is_dir():
        raise ValueError(f"PROMETHEUS_MULTIPROC_DIR {path} is not a directory")
    if path.exists():
        children = sorted(path.iterdir())
        foreign = [child.name for child in children if not is_metric_file(child)]
        if foreign:
            shown = ", ".join(foreign[:5]) + (
                f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
            )
            raise ValueError(
                f"PROMETHEUS_MULTIPROC_DIR {path} holds {shown}, which are not metric files: "
                "refusing to empty it; point the variable at a directory of its own"
            )
        for child in children:
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
    from worker.contract.keys import Keys
    from worker.service.runtime import redis_client

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
