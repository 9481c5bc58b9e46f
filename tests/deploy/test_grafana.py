"""docs/grafana/billing.json: every panel query is PromQL that parses, and every metric it names is
one the worker really exports — names collected from the live collectors (the worker's metrics as
imported, and the exporter's backlog collector reading the real Redis), not from a list kept here."""

from __future__ import annotations

from pathlib import Path

import orjson
import promql_parser
import pytest
import redis
from prometheus_client import REGISTRY
from prometheus_client.registry import Collector

from worker import metrics
from worker.contract.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "billing.json"

# The sample names of a family of each type (prometheus_client's exposition).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
    "gauge": ("",),
}


def exported(collectors: list[Collector]) -> set[str]:
    names: set[str] = set()
    for collector in collectors:
        for family in collector.collect():
            names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
            names.update(sample.name for sample in family.samples)
    return names


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expression) of every target of every panel, rows' panels included."""
    found = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                found.append((inner["title"], target["expr"]))
    return found


def metric_names(expression: str) -> set[str]:
    names: set[str] = set()

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            names.update(m.value for m in node.matchers.matchers if m.name == "__name__")
        return True

    promql_parser.walk(promql_parser.parse(expression), visit)
    return names


@pytest.fixture
def worker_exports(redis_client: redis.Redis, prefix: str) -> set[str]:
    """The worker's own metrics (``billing_*``: registered in the default registry by importing
    ``worker.metrics``) and the backlog the exporter reads from Redis."""
    backlog = metrics.BacklogCollector(redis_client, Keys(prefix))
    names = {name for name in exported([REGISTRY, backlog]) if name.startswith("billing_")}
    assert "billing_calls_total" in names and "billing_consumer_lag" in names
    return names


def test_every_query_parses_and_names_an_exported_metric(worker_exports: set[str]) -> None:
    dashboard = orjson.loads(DASHBOARD.read_bytes())
    found = queries(dashboard)
    assert len(found) >= 10
    referenced: set[str] = set()
    for title, expression in found:
        names = metric_names(expression)
        assert names, f"{title}: {expression!r} names no metric"
        unknown = names - worker_exports
        assert not unknown, f"{title}: {sorted(unknown)} are not exported by the worker"
        referenced |= names
    # the panels the dashboard promises: lag, settle latency, outcomes, exposure, dead letters, drift
    assert {
        "billing_consumer_lag",
        "billing_settle_latency_seconds_bucket",
        "billing_calls_total",
        "billing_alert_exposure_micros",
        "billing_dead_letter_entries",
        "billing_dead_letters_added_total",
        "billing_drift_median_ppm",
    } <= referenced


def test_the_check_catches_a_metric_the_worker_does_not_export(worker_exports: set[str]) -> None:
    assert metric_names('sum(rate(billing_calls_totals{outcome="void"}[5m]))') == {
        "billing_calls_totals"
    }
    assert "billing_calls_totals" not in worker_exports
    assert "billing_calls_total" in worker_exports and "billing_backlog_up" in worker_exports
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(billing_calls_total[5m])")


def selectors(expression: str) -> list[dict[str, str]]:
    """Each vector selector's label matchers of ``expression`` (name -> value)."""
    found: list[dict[str, str]] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append({m.name: m.value for m in node.matchers.matchers})
        return True

    promql_parser.walk(promql_parser.parse(expression), visit)
    return found


def test_every_query_is_filtered_by_the_job_and_instance_variables() -> None:
    dashboard = orjson.loads(DASHBOARD.read_bytes())
    names = [variable["name"] for variable in dashboard["templating"]["list"]]
    assert names == ["datasource", "job", "instance"]
    for title, expression in queries(dashboard):
        found = selectors(expression)
        assert found, title
        for matchers in found:
            assert (matchers.get("job"), matchers.get("instance")) == ("$job", "$instance"), (
                f"{title}: {expression}"
            )
    assert selectors("sum(rate(billing_calls_total[5m]))") == [{}]  # the check can fail


def test_the_dashboard_uses_a_datasource_variable_and_unique_panel_ids() -> None:
    dashboard = orjson.loads(DASHBOARD.read_bytes())
    variable = dashboard["templating"]["list"][0]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
