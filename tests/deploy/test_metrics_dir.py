"""``billing worker`` empties PROMETHEUS_MULTIPROC_DIR of its metric files, and of nothing else; it
and ``billing metrics serve`` refuse a directory another program writes to (LiteLLM's proxy)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import Gauge

from worker.cli import main
from worker.cli.metrics import GAUGE_MODES, is_metric_file, prepare_multiprocess_dir

# Every kind of file prometheus_client writes in multiprocess mode, under this project's process
# identifier (``worker.metrics``: <host>-<pid>).
WRITER = textwrap.dedent(
    """
    from prometheus_client import Counter, Gauge, Histogram, Summary, values
    from worker import metrics  # the worker's own metrics, named <host>-<pid>

    Counter("c", "c").inc()
    Histogram("h", "h").observe(1)
    Summary("s", "s").observe(1)
    for mode in sorted(Gauge._MULTIPROC_MODES):
        Gauge(f"g_{mode}", "g", multiprocess_mode=mode).set(1)
    """
)
# Another program in multiprocess mode, as LiteLLM's proxy is: prometheus_client's default value
# class, files named after the bare pid.
OTHER_PROGRAM = textwrap.dedent(
    """
    from prometheus_client import Counter, Gauge

    Counter("litellm_requests_metric", "c").inc()
    Gauge("litellm_remaining", "g", multiprocess_mode="livesum").set(1)
    """
)


def write_metric_files(directory: Path, writer: str = WRITER) -> list[Path]:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    subprocess.run([sys.executable, "-c", writer], env=env, check=True, timeout=60)
    return sorted(directory.iterdir())


def test_every_file_prometheus_client_writes_is_recognised_and_cleared(
    tmp_path: Path, monkeypatch
) -> None:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    written = write_metric_files(directory)
    kinds = {path.name.split("_")[0] for path in written}
    assert kinds == {"counter", "gauge", "histogram", "summary"}
    assert set(GAUGE_MODES) == Gauge._MULTIPROC_MODES
    assert sum(path.name.startswith("gauge_") for path in written) >= len(GAUGE_MODES)
    assert all(is_metric_file(path) for path in written), [p.name for p in written]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    assert prepare_multiprocess_dir() == directory
    assert list(directory.iterdir()) == []


@pytest.mark.parametrize(
    "name",
    [
        "billing.db",
        "counter.db",
        "counter_x.db-journal",
        "notes.txt",
        "gauge_bogus_1.db",
        ".env",
        "counter_1234.db",  # a bare pid: another program's
        "gauge_livesum_77.db",
    ],
)
def test_other_names_are_not_metric_files(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"x")
    assert not is_metric_file(tmp_path / name)


def test_worker_refuses_a_directory_holding_a_ledger(tmp_path: Path, monkeypatch) -> None:
    """The reported accident: PROMETHEUS_MULTIPROC_DIR=var next to the SQLite ledger."""
    monkeypatch.chdir(tmp_path)
    var = tmp_path / "var"
    var.mkdir()
    ledger = var / "billing.db"
    ledger.write_bytes(b"SQLite format 3\x00 the books")
    (var / "state").mkdir()
    metric_files = write_metric_files(var)[:3]
    before = sorted(var.iterdir())
    from worker.service.app import app

    def started(argv: list[str]) -> None:
        raise AssertionError("the worker started on a directory it should have refused")

    monkeypatch.setattr(app, "worker_main", started)  # a wrong answer must not hang the test

    result = CliRunner().invoke(main, ["worker"], env={"PROMETHEUS_MULTIPROC_DIR": str(var)})

    assert result.exit_code == 2, result.output
    assert "billing.db" in result.output and "not metric files" in result.output
    assert "refusing" in result.output
    assert ledger.read_bytes() == b"SQLite format 3\x00 the books"
    assert sorted(var.iterdir()) == before, "nothing may be removed from a refused directory"
    assert all(path.exists() for path in metric_files)


def test_a_directory_of_metric_files_only_is_cleared(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "prometheus"))
    directory = tmp_path / "prometheus"
    directory.mkdir()
    assert write_metric_files(directory)
    prepare_multiprocess_dir()
    assert list(directory.iterdir()) == []


def test_a_file_in_place_of_the_directory_is_refused(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "billing.db"
    target.write_bytes(b"books")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(target))
    with pytest.raises(ValueError, match="not a directory"):
        prepare_multiprocess_dir()
    assert target.read_bytes() == b"books"


def test_a_directory_another_program_writes_to_is_refused(tmp_path: Path, monkeypatch) -> None:
    """LiteLLM's proxy given the same PROMETHEUS_MULTIPROC_DIR: its files (bare pids) beside the
    worker's. Neither the worker nor the exporter takes the directory; each says why in one line."""
    monkeypatch.chdir(tmp_path)
    directory = tmp_path / "prometheus"
    directory.mkdir()
    ours = write_metric_files(directory)
    theirs = sorted(set(write_metric_files(directory, OTHER_PROGRAM)) - set(ours))
    assert [path.name.split("_")[0] for path in theirs] == ["counter", "gauge"]
    assert not any(is_metric_file(path) for path in theirs)
    before = sorted(directory.iterdir())
    from worker.service.app import app

    def started(argv: list[str]) -> None:
        raise AssertionError("the worker started on a directory it should have refused")

    monkeypatch.setattr(app, "worker_main", started)
    env = {"PROMETHEUS_MULTIPROC_DIR": str(directory)}
    for args in (["worker"], ["metrics", "serve", "--no-backlog", "--port", "0"]):
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == 2, (args, result.output)
        [line] = result.output.strip().splitlines()
        assert theirs[0].name in line and "LiteLLM" in line and "refusing" in line, line
    assert sorted(directory.iterdir()) == before, "nothing may be removed from a refused directory"
