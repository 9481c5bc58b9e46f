"""deploy/monitoring/billing.rules.yml: a rules file Prometheus loads (``promtool check rules``, from
Debian's prometheus package, which ``make test`` installs with scripts/ensure-promtool), each rule
with a ``runbook_url`` into docs/operations.md at an anchor that exists there."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "monitoring" / "billing.rules.yml"
SCRIPT = ROOT / "scripts" / "ensure-promtool"
BASH = shutil.which("bash") or "/bin/bash"


def promtool(path: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is missing: run `bash scripts/ensure-promtool` (make test does)")
    return subprocess.run(
        [binary, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )


def rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def anchors(markdown: str) -> set[str]:
    """The fragment ids a Markdown page has: explicit ``<a id>`` and GitHub's heading slugs."""
    found = set(re.findall(r'<a id="([^"]+)"', markdown))
    for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    checked = promtool(RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout
    broken = tmp_path / "broken.yml"  # the check can fail: one expression cut short
    broken.write_text(RULES.read_text().replace("> 120", "> ", 1))
    assert promtool(broken).returncode != 0


def test_every_rule_has_a_runbook_that_exists() -> None:
    found = rules()
    assert len(found) >= 17
    pages: dict[str, set[str]] = {}
    for rule in found:
        url = rule["annotations"]["runbook_url"]
        path, _, fragment = url.partition("#")
        assert path == "docs/operations.md" and fragment, (rule["alert"], url)
        if path not in pages:
            pages[path] = anchors((ROOT / path).read_text())
        assert fragment in pages[path], f"{rule['alert']}: no #{fragment} in {path}"
        assert fragment == rule["alert"].lower()
    assert "alerts-what-each-means-and-what-to-do" in pages["docs/operations.md"]


def test_ensure_promtool_runs_before_the_tests_and_says_the_command(tmp_path: Path) -> None:
    planned = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
    ).stdout.splitlines()
    ensure = next(i for i, line in enumerate(planned) if "scripts/ensure-promtool" in line)
    assert ensure < next(i for i, line in enumerate(planned) if "/pytest " in line)
    # Missing, not root: one line with the command, nothing installed (stand-ins on PATH only).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    for name, body in (("id", "echo 1000"), ("apt-get", f'echo "$*" >> {log}')):
        (bin_dir / name).write_text(f"#!{BASH}\n{body}\n")
        (bin_dir / name).chmod(0o755)
    done = subprocess.run(
        [BASH, str(SCRIPT)], env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1 and not log.exists()
    [line] = done.stderr.splitlines()
    assert "apt-get update && apt-get install -y prometheus" in line and "sudo" in line
    (bin_dir / "promtool").write_text(f"#!{BASH}\nexit 0\n")  # present: nothing at all
    (bin_dir / "promtool").chmod(0o755)
    done = subprocess.run(
        [BASH, str(SCRIPT)], env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_every_labelled_counter_is_exported_at_zero_before_its_first_event() -> None:
    """A fresh process's scrape: each labelled counter already has its series, at 0, so the
    dashboard and the rules read 0 rather than "No data" (``rate`` of an absent series is empty)."""
    script = (
        "from prometheus_client import REGISTRY, generate_latest\n"
        "import worker.metrics\n"
        "print(generate_latest(REGISTRY).decode())"
    )
    body = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    families = {
        f.name: f for f in text_string_to_metric_families(body) if f.name.startswith("billing_")
    }
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
        if not s.name.endswith("_created")
    }
    # what docs/metrics.md lists for each label, and what the rules select
    for name, labels in (
        ("billing_calls_total", {"outcome": "settled", "reason": ""}),
        ("billing_calls_total", {"outcome": "void", "reason": ""}),
        ("billing_calls_total", {"outcome": "unsettled", "reason": "unpriced"}),
        ("billing_calls_total", {"outcome": "unsettled", "reason": "missing_usage"}),
        ("billing_dead_letters_total", {"source": "sweep"}),
        ("billing_sweep_total", {"action": "settled_late"}),
        ("billing_task_interruptions_total", {"task": "drain"}),
        ("billing_alert_deliveries_total", {"result": "failed"}),
        ("billing_authorization_corrections_total", {"kind": "unseen_charge"}),
    ):
        assert samples.get((name, tuple(sorted(labels.items())))) == 0.0, (name, labels)
    stream_labelled = {"billing_notifications", "billing_notifications_acked"}
    for family in families.values():
        if family.type == "counter" and family.name not in stream_labelled:
            assert [s for s in family.samples if s.name.endswith("_total")], family.name
