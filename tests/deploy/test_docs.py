"""The operations docs: their YAML parses and every metric the alert rules (deploy/monitoring) use
is one we expose."""

from __future__ import annotations

import re
from pathlib import Path

import redis
import yaml

from worker.contract.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def yaml_blocks(path: Path) -> list[object]:
    text = path.read_text()
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def exposed(client: redis.Redis) -> set[str]:
    from prometheus_client import REGISTRY

    from worker import metrics
    from worker.gateway import metrics as gateway_metrics  # the tee's, in the gateway process

    assert gateway_metrics.QUEUED is not None
    families = list(REGISTRY.collect()) + list(
        metrics.BacklogCollector(client, Keys("doc-test")).collect()
    )
    return {
        family.name + suffix
        for family in families
        if family.name.startswith("billing_")
        for suffix in SUFFIXES.get(family.type, ("",))
    }


def test_alert_rules_use_exposed_metrics(redis_client: redis.Redis) -> None:
    rules_file = yaml.safe_load((ROOT / "deploy" / "monitoring" / "billing.rules.yml").read_text())
    rules = [rule for g in rules_file["groups"] for rule in g["rules"]]
    assert len(rules) >= 10
    names = exposed(redis_client)
    for rule in rules:
        assert rule["alert"].startswith("Billing")
        used = set(re.findall(r"\bbilling_[a-z_]+", rule["expr"]))
        assert used and used <= names, f"{rule['alert']}: {used - names}"
    text = (ROOT / "docs" / "operations.md").read_text()
    for rule in rules:  # every alert has a row saying what to do
        assert f"`{rule['alert']}`" in text, rule["alert"]


def test_metrics_table_lists_what_is_exposed(redis_client: redis.Redis) -> None:
    table = set(
        re.findall(r"^\| `(billing_[a-z_]+)`", (ROOT / "docs" / "metrics.md").read_text(), re.M)
    )
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in exposed(redis_client)}
    assert table == families


def test_readme_links_operations() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "## Operations" in readme and "docs/operations.md" in readme
