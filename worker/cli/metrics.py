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

# The names prometheus_client gives the worker's multiprocess files (``values.MultiProcessValue``
# with ``worker.metrics.process_identifier``): ``<type>_<host>-<pid>.db``, gauges
# ``gauge_<mode>_<host>-<pid>.db`` (the host with ``_`` replaced). A file named after a bare pid
# (``counter_1234.db``, the library's default) is another program's: LiteLLM's proxy, for one, which
# also deletes every ``*.db`` of the directory when it starts, so a directory it shares with the
# worker loses the worker's counters and mixes its own into them. The rule: the directory holds the
# worker's own files and nothing else (``foreign_files``); ``billing worker`` and ``billing metrics
# serve`` refuse it otherwise.
# The modes are ``Gauge._MULTIPROC_MODES``, spelled out: importing prometheus_client here would fix
# its value class before ``PROMETHEUS_MULTIPROC_DIR`` is settled (tests/deploy/test_metrics_dir.py
# checks the pattern against every file the installed version writes).
GAUGE_MODES = (
    "all", "liveall", "min", "livemin", "max", "livemax", "sum", "livesum", "mostrecent",
    "livemostrecent",
)  # fmt: skip
METRIC_FILE = re.compile(
    rf"(?:counter|histogram|summary|gauge_(?:{'|'.join(GAUGE_MODES)}))_[A-Za-z0-9.-]+-[0-9]+\.db"
)


def is_metric_file(path: Path) -> bool:
    """A regular file named as prometheus_client names the worker's multiprocess files."""
    return METRIC_FILE.fullmatch(path.name) is not None and path.is_file() and not path.is_symlink()


def foreign_files(path: Path) -> list[str]:
    """The names in directory ``path`` that are not the worker's metric files, sorted."""
    return sorted(child.name for child in path.iterdir() if not is_metric_file(child))


def refusal(path: Path, foreign: list[str]) -> str:
    """The one line that refuses ``path`` for holding ``foreign``."""
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    return (
        f"PROMETHEUS_MULTIPROC_DIR {path} holds {shown}, which are not metric files of the billing "
        "worker (another program shares it? LiteLLM deletes every *.db there when it starts): "
        "refusing it; point the variable at a directory of its own"
    )


def prepare_multiprocess_dir(default: Path = DEFAULT_WORKER_DIR) -> Path:
    """For ``billing worker``: use ``PROMETHEUS_MULTIPROC_DIR`` (default ``./var/prometheus``), emptied
    of the metric files an earlier run left.

    Must run before ``worker.metrics`` is imported. Emptying matters: files left by an earlier run
    hold its counters, and the exporter would add them to the new ones. Only prometheus_client's own
    files are removed (``METRIC_FILE``); a directory holding anything else (a subdirectory, a ledger,
    a file of another program, another program's metric files) raises ``ValueError`` and nothing
    in it is touched. Do not call it
    while other workers share the directory (several containers on one volume): their counters
    would restart.
    """
    path = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or default)
    if path.exists() and not path.is_dir():
        raise ValueError(f"PROMETHEUS_MULTIPROC_DIR {path} is not a directory")
    if path.exists():
        foreign = foreign_files(path)
        if foreign:
            raise ValueError(refusal(path, foreign))
        for child in path.iterdir():
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
        foreign = foreign_files(Path(directory))
        if foreign:  # adding another program's counters to the worker's would be wrong, silently
            fail("metrics serve", refusal(Path(directory), foreign))
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
