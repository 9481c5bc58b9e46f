"""Metrics: batches recorded by several processes, scraped over HTTP from ``billing metrics serve``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from devtools.localservers.ports import free_port
from worker.cli.metrics import prepare_multiprocess_dir
from worker.consumer.calls import BatchStats
from worker.contract.keys import Keys

BILLING = str(Path(sys.executable).parent / "billing")

RECORDER = textwrap.dedent(
    """
    from worker import metrics
    from worker.consumer.calls import BatchStats
    from worker.consumer.sweeper import SweepStats

    stats = BatchStats(
        read=5, held=1, settled=2, unsettled=1, voided=1, duplicates=1, dead=1, acked=5,
        reasons={"missing_usage": 1}, charged_micros=1234, latencies_ms=[40, 1500],
    )
    metrics.record_batch("{stream}", stats)
    metrics.record_sweep(SweepStats(finalized=2, settled_late=1, dead=1))
    metrics.alert_delivery(True)
    metrics.alert_delivery(False)
    """
)


def scrape(url: str, timeout: float = 20.0) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint, keyed by name and sorted labels; waits for it to answer."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = response.read().decode()
            break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_batches_from_several_processes_add_up_at_the_exporter(
    tmp_path: Path, redis_client: redis.Redis, prefix: str
) -> None:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    keys = Keys(prefix, partitions=2)
    stream = keys.events(0)
    # Backlog for the scrape-time collector: three notifications, one delivered and unacked.
    for n in range(3):
        redis_client.xadd(stream, {"kind": "open", "request_id": f"r{n}", "ts": 0})
    redis_client.xgroup_create(stream, keys.group, id="0")
    redis_client.xreadgroup(keys.group, "c1", {stream: ">"}, count=1)
    redis_client.xadd(keys.dead, {"source": "call", "reason": "test"})
    redis_client.xadd(keys.dead, {"source": "call", "reason": "test"})
    redis_client.xtrim(
        keys.dead, maxlen=1, approximate=False
    )  # a cap or an operator's trim: the length falls back

    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
        "REDIS_URL": _url(redis_client),
        "BILLING_PREFIX": prefix,
        "BILLING_PARTITIONS": "2",
    }
    for _ in range(2):  # two pool children, as Celery's prefork pool would have
        subprocess.run(
            [sys.executable, "-c", RECORDER.replace("{stream}", stream)], env=env, check=True
        )
    written = sorted(directory.iterdir())
    assert len([p for p in written if p.name.startswith("counter_")]) == 2

    port = free_port()
    server = subprocess.Popen(
        [BILLING, "metrics", "serve", "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        server.terminate()
        _, err = server.communicate(timeout=10)
    assert server.returncode == 0, err.decode()
    assert b"every process writing to" in err

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("billing_calls_total", outcome="settled", reason="") == 4
    assert value("billing_calls_total", outcome="void", reason="") == 2
    assert value("billing_calls_total", outcome="unsettled", reason="missing_usage") == 2
    assert value("billing_charged_micros_total") == 2468
    assert value("billing_duplicates_total") == 2
    assert value("billing_holds_total") == 2
    assert value("billing_dead_letters_total", source="consumer") == 2
    assert value("billing_dead_letters_total", source="sweep") == 2
    assert value("billing_notifications_total", stream=stream) == 10
    assert value("billing_sweep_total", action="settled_late") == 2
    assert value("billing_settle_latency_seconds_count") == 4
    assert value("billing_settle_latency_seconds_bucket", le="0.05") == 2
    assert value("billing_settle_latency_seconds_bucket", le="2.5") == 4
    assert value("billing_settle_latency_seconds_sum") == pytest.approx(3.08)
    assert value("billing_alert_deliveries_total", result="ok") == 2
    assert value("billing_alert_deliveries_total", result="failed") == 2
    assert time.time() - value("billing_last_drain_timestamp_seconds", stream=stream) < 60
    # read from Redis at scrape time
    assert value("billing_backlog_up") == 1
    assert value("billing_consumer_lag", stream=stream) == 2
    assert value("billing_pending_entries", stream=stream) == 1
    assert value("billing_consumer_lag", stream=keys.events(1)) == 0
    assert value("billing_dead_letter_entries") == 1
    assert value("billing_dead_letters_added_total") == 2  # what the alert reads: never falls
    assert sorted(directory.iterdir()) == written, "the exporter must not write to the directory"


def _url(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


def test_in_process_metrics_without_a_directory(redis_client: redis.Redis, prefix: str) -> None:
    """Without PROMETHEUS_MULTIPROC_DIR the metrics live in memory and the exporter serves them."""
    env = {k: v for k, v in os.environ.items() if k.upper() != "PROMETHEUS_MULTIPROC_DIR"} | {
        "REDIS_URL": _url(redis_client),
        "BILLING_PREFIX": prefix,
    }
    port = free_port()
    script = textwrap.dedent(
        f"""
        import threading, urllib.request
        from worker import metrics
        from worker.consumer.calls import BatchStats
        from worker.contract.keys import Keys
        from worker.service.runtime import redis_client
        from prometheus_client import start_http_server

        metrics.record_batch("s", BatchStats(read=1, settled=1, charged_micros=7,
                                             latencies_ms=[20]))
        collector = metrics.BacklogCollector(redis_client("{_url(redis_client)}", cluster=False),
                                             Keys("{prefix}"))
        registry = metrics.exporter_registry(None, collector)
        server, _ = start_http_server({port}, addr="127.0.0.1", registry=registry)
        body = urllib.request.urlopen("http://127.0.0.1:{port}/metrics").read().decode()
        server.shutdown()
        print(body)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
    ).stdout
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(out)
        for s in family.samples
    }
    assert samples[("billing_calls_total", (("outcome", "settled"), ("reason", "")))] == 1
    assert samples[("billing_charged_micros_total", ())] == 7
    assert samples[("billing_settle_latency_seconds_count", ())] == 1
    assert samples[("billing_consumer_lag", (("stream", f"{prefix}:events"),))] == 0
    assert samples[("billing_backlog_up", ())] == 1


def test_backlog_down_is_reported_not_raised(tmp_path: Path) -> None:
    from worker import metrics
    from worker.service.runtime import redis_client

    client = redis_client(f"redis://127.0.0.1:{free_port()}/0", cluster=False)
    families = list(metrics.BacklogCollector(client, Keys("x")).collect())
    assert [(f.name, f.samples[0].value) for f in families] == [("billing_backlog_up", 0)]


def test_record_batch_never_raises() -> None:
    from worker import metrics

    metrics.record_batch("s", object())  # a wrong object is logged, not raised
    metrics.record_batch("s", BatchStats())


def test_worker_prepares_an_empty_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    stale = tmp_path / "var" / "prometheus"
    stale.mkdir(parents=True)
    (stale / "counter_old-1.db").write_bytes(b"x")
    path = prepare_multiprocess_dir()
    assert path == Path("var/prometheus")
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(stale.resolve())
    assert list(stale.iterdir()) == []
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "elsewhere"))
    assert prepare_multiprocess_dir() == tmp_path / "elsewhere"
    assert (tmp_path / "elsewhere").is_dir()
