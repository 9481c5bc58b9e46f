"""``billing show`` says what the provider reported and, for a usage block it could not bill, what
is wrong with it (a SQLite ledger file, through click's CliRunner)."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from worker.cli import main
from worker.core.reconcile import reconcile_response
from worker.ledger.database import make_engine, session_factory
from worker.ledger.findings import record_findings
from worker.ledger.operations import apply_result, hold

from .shapes import AT, BOOK, load, meta_of, reconcile


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    runner = CliRunner()
    assert runner.invoke(main, ["db", "upgrade"]).exit_code == 0
    return runner


def _settle(tmp_path: Path, meta, result) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(f"sqlite:///{tmp_path / 'var' / 'billing.db'}")
    with session_factory(engine)() as session, session.begin():
        hold(session, meta, now=AT)
        effect = apply_result(session, result, now=AT, grace=timedelta(hours=1))
        record_findings(session, result, effect, salt="show-test-key", now=AT, meta=meta)
    engine.dispose()


def test_show_prints_the_usage_blocks_problem(runner: CliRunner, tmp_path: Path) -> None:
    name = "openai/chat_object_details.json"
    document = copy.deepcopy(load(name))
    document["body"]["usage"]["completion_tokens"] = -46  # a count no call can have
    meta = meta_of(document, name)
    result = reconcile_response(meta, document["status"], document["body"], BOOK)
    _settle(tmp_path, meta, result)

    shown = runner.invoke(main, ["show", meta.request_id])
    assert shown.exit_code == 0, shown.output
    assert "reason implausible_usage" in shown.output
    [line] = [line for line in shown.output.splitlines() if line.startswith("finding")]
    assert "implausible_usage" in line and "completion_tokens" in line
    as_json = json.loads(runner.invoke(main, ["show", meta.request_id, "--json"]).output)
    assert [f["kind"] for f in as_json["findings"]] == ["implausible_usage"]


def test_show_prints_the_provider_and_its_own_cost(runner: CliRunner, tmp_path: Path) -> None:
    name = "xai/reasoning_apart_with_cost.json"
    meta = meta_of(load(name), name)
    _settle(tmp_path, meta, reconcile(name))

    shown = runner.invoke(main, ["show", meta.request_id])
    assert shown.exit_code == 0, shown.output
    # 232,856,000 ticks / 10^4 = 23,285.6 → 23,286 micro-USD (tests/providers/test_shapes.py)
    assert "provider   xai  shape reasoning_apart" in shown.output
    assert "its cost 23286 micros" in shown.output
    usage = json.loads(runner.invoke(main, ["show", meta.request_id, "--json"]).output)["usage"]
    assert (usage["provider"], usage["reasoning_tokens"]) == ("xai", 2809)


def test_show_prints_the_unit_prices_the_call_was_charged_at(
    runner: CliRunner, tmp_path: Path
) -> None:
    """Anthropic's cache lifetimes through LiteLLM, with a web search (tests/providers/test_shapes.py:
    18,460 micro-USD): the rates each part was charged at and the row they came from."""
    name = "litellm/anthropic_cache_lifetimes_body.json"
    meta = meta_of(load(name), name)
    _settle(tmp_path, meta, reconcile(name))

    shown = runner.invoke(main, ["show", meta.request_id])
    assert shown.exit_code == 0, shown.output
    assert "charge     18460 micros" in shown.output
    assert "parts      cache write 556, cache write 1h 100, web search requests 1" in shown.output
    assert (
        "charged at row rates, USD per 1M tokens (web_search: per request): input 3.00  "
        "cached_input 0.30  cache_write 3.75  cache_write_1h 6.00  output 15.00  web_search 0.01"
    ) in shown.output
    assert "from the override row of claude-sonnet-4-5 (provider any, tier default" in shown.output
    document = json.loads(runner.invoke(main, ["show", meta.request_id, "--json"]).output)
    assert document["unit_prices"]["cache_write_1h"] == "6.00"
    assert document["usage"]["cache_write_1h_tokens"] == 100
