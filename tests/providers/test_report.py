"""``billing report``'s provider section: calls by usage shape, and our charge against the cost the
provider reported, from real provider shapes settled through the ledger (both engines)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from worker.reports.query import build_report
from worker.reports.render_csv import render_csv
from worker.reports.render_json import report_dict
from worker.reports.render_table import render_table
from worker.reports.spec import ReportSpec

from .shapes import AT
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
    assert "provider,openrouter,openai" not in render_csv(report)  # keyed columns, not positions
    assert any(
        line.startswith("provider,") and ",openrouter,openai," in line
        for line in render_csv(report).splitlines()
    )
