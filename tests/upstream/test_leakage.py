"""The leakage finding's thresholds (pure): cost at our prices, or share of the day's tokens."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker.alerts.upstream_leakage import leakage_findings
from worker.core.prices import load_price_book
from worker.core.result import Usage
from worker.upstream.matching import Ledger, priced_upstream, reconcile

AT = datetime(2025, 7, 1, 12, tzinfo=UTC)
DAY = ("2025-07-01", "openai")
# 10,000 upstream tokens, 100 of them leaked (1 %): gpt-4o at list prices, 100 input tokens
LEDGER = {
    ("2025-07-01", "openai", "gpt-4o", "", "default"): Ledger(
        calls=9, billed_calls=9, billed_input=9900
    )
}
BOOK = load_price_book()
UPSTREAM = {
    ("2025-07-01", "openai", "gpt-4o", "k", "default"): priced_upstream(
        BOOK, "openai", "gpt-4o", AT.date(), None, Usage(10_000, 0), 10
    )
}
FOUND = reconcile(LEDGER, UPSTREAM, {}, BOOK)
COST = int(FOUND.rows[0].leak_cost or 0)
assert COST > 0


@pytest.mark.parametrize(
    ("min_micros", "min_pct", "alerted"),
    [
        (COST, 0, True),  # the cost reaches the threshold
        (COST + 1, 0, False),
        (0, 1, True),  # 1 % of the day's tokens
        (0, 2, False),
        (COST + 1, 2, False),
        (0, 0, False),  # both tests off
    ],
)
def test_thresholds(min_micros: int, min_pct: int, alerted: bool) -> None:
    found = leakage_findings(FOUND, {DAY: AT}, min_micros=min_micros, min_pct=min_pct)
    assert bool(found) is alerted
    if found:
        (finding,) = found
        assert (finding.kind, finding.reason, finding.at) == ("upstream_leakage", "openai", AT)
        assert (finding.exposure_micros, finding.facts["leaked_tokens"]) == (COST, 100)
        assert finding.facts["leaked_requests"] == 1


def test_only_days_of_the_import_are_found() -> None:
    assert leakage_findings(FOUND, {("2025-07-02", "openai"): AT}, min_micros=1, min_pct=1) == []
