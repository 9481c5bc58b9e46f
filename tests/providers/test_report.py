"""``billing report``'s provider section: calls by usage shape, and our charge against the cost the
provider reported, from real provider shapes settled through the ledger (both engines)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

from sqlalchemy.orm import Session

from worker.ledger.findings import record_findings
from worker.ledger.operations import apply_result, hold
from worker.reports.query import build_report
from worker.reports.render_csv import render_csv
from worker.reports.render_html import render_html
from worker.reports.render_json import report_dict
from worker.reports.render_table import render_table
from worker.reports.spec import ReportSpec

from .shapes import AT, WITHOUT_DIMENSIONS, load, meta_of, reconcile
from .test_record import _apply


def test_the_report_shows_each_provider_by_shape_with_the_cost_cross_check(
    session: Session,
) -> None:
    _apply(session, "xai/reasoning_apart_with_cost.json")
    _apply(session, "openrouter/usage_accounting.json")
    spec = ReportSpec(AT, AT + timedelta(minutes=1), ())
    report = build_report(session.connection(), spec)
    rows = {
        (p.provider, p.usage_shape): p
        for p in report.providers
        if p.provider in ("xai", "openrouter")
    }
    xai, openrouter = rows[("xai", "reasoning_apart")], rows[("openrouter", "openai")]
    # xAI: 23,286 micro-USD charged, and its cost_in_usd_ticks says the same (tests/providers).
    assert (xai.calls, int(xai.charged), xai.costed_calls) == (1, 23_286, 1)
    assert (int(xai.charged_costed), int(xai.provider_cost), xai.cost_drift) == (23_286, 23_286, 0)
    # OpenRouter: we charged 687 micro-USD where it reported 0.95 USD: (687 - 950,000) / 950,000.
    assert (int(openrouter.charged), int(openrouter.provider_cost)) == (687, 950_000)
    assert openrouter.cost_drift == (687 - 950_000) / 950_000
    table = render_table(report)
    assert "reasoning_apart" in table and "-0.999277" in table
    providers = [p for p in report_dict(report)["providers"] if p["provider"] == "openrouter"]
    assert providers[0]["provider_cost_micros"] == 950_000
    providers_csv = render_csv(report, "providers")  # its own tidy table (issue 39)
    assert providers_csv.splitlines()[0].startswith("provider,usage_shape,calls,")
    assert any(line.startswith("openrouter,openai,") for line in providers_csv.splitlines())


def test_the_report_counts_unpriced_components_by_model_and_field(session: Session) -> None:
    """Which price to add: the calls unsettled ``unpriced_component`` per model and per usage
    field their anomaly names (tests/providers/test_shapes.py for each fixture's fields)."""
    for name in (
        "anthropic/web_search_server_tool_use.json",
        "anthropic/cache_write_1h.json",
        "litellm/anthropic_cache_lifetimes_body.json",
        "perplexity/citations_and_searches_stream.json",
        "xai/reasoning_apart_with_cost.json",  # settled: not counted
    ):
        _unsettled_or_settled(session, name)
    spec = ReportSpec(AT, AT + timedelta(minutes=1), ())
    report = build_report(session.connection(), spec)
    rows = {
        (u.model, u.usage_field): u.calls
        for u in report.unpriced_components
        if u.model in ("claude-sonnet-4-5", "sonar")
    }
    # Sonnet 4.5's row without its 1-hour write and search prices (the dimension a price is
    # missing for, by the usage field that counts it); Perplexity's fields the reader has no
    # price for at all
    assert rows == {
        ("claude-sonnet-4-5", "cache_write_1h_tokens"): 2,
        ("claude-sonnet-4-5", "web_search_requests"): 2,
        ("sonar", "citation_tokens"): 1,
        ("sonar", "web_search_requests"): 1,
    }
    assert report.unsettled_by_reason["unpriced_component"] >= 4
    table = render_table(report)
    assert "web_search_requests" in table and "citation_tokens" in table
    assert {"model": "sonar", "usage_field": "citation_tokens", "calls": 1} in report_dict(report)[
        "unpriced_components"
    ]
    unpriced = [
        (row["model"], row["usage_field"], row["calls"])
        for row in csv.DictReader(io.StringIO(render_csv(report, "unpriced_components")))
    ]
    assert ("sonar", "web_search_requests", "1") in unpriced
    page = render_html(report)
    assert (
        'data-unpriced-model="claude-sonnet-4-5" data-unpriced-field="web_search_requests">2<'
    ) in page


def _unsettled_or_settled(session: Session, name: str) -> None:
    result = reconcile(name, WITHOUT_DIMENSIONS)
    meta = meta_of(load(name), name)
    hold(session, meta, now=AT)
    effect = apply_result(session, result, now=AT, grace=timedelta(hours=1))
    record_findings(session, result, effect, salt="s", now=AT, meta=meta)
