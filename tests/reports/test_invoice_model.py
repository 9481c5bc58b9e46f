"""The invoice's lines split what the calls were charged, to the micro-dollar (issue 39, point 1).

Oracles, independent of ``invoice_model``: the calls' charge is ``Price.charge``, the one charge
function the worker bills with, per call; a line's expected amount is quantity x unit price in
exact fractions; ``allocate`` is checked against exact proportional shares.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.prices import Price
from worker.core.result import Usage
from worker.reports.invoice_model import (
    TOKEN_COLUMNS,
    InvoiceDocument,
    InvoiceError,
    Party,
    UsageGroup,
    allocate,
    merge,
    usage_lines,
    usd,
)

AT = datetime(2025, 3, 10, tzinfo=UTC)
# Rates with more digits than a micro-dollar, so per-call rounding differs from the exact sums.
PRICE = Price(
    model="m", effective_from=datetime(2020, 1, 1, tzinfo=UTC), input=Decimal("0.15"),
    cached_input=Decimal("0.075"), output=Decimal("0.6"), reasoning=Decimal("2.4375"),
    cache_write=Decimal("0.1875"),
)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    total=st.integers(min_value=-(10**9), max_value=10**12),
    weights=st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=8).filter(any),
)
def test_allocate_sums_exactly_and_stays_within_one_of_the_exact_share(
    total: int, weights: list[int]
) -> None:
    shares = allocate(total, weights)
    assert sum(shares) == total
    whole = sum(weights)
    for share, weight in zip(shares, weights, strict=True):
        exact = Fraction(total * weight, whole)
        assert exact - 1 < share < exact + 1


usages = st.builds(
    lambda cached, write, plain, reasoning, out: Usage(
        prompt_tokens=cached + write + plain,
        completion_tokens=reasoning + out,
        cached_tokens=cached,
        cache_write_tokens=write,
        reasoning_tokens=reasoning,
    ),
    st.integers(0, 50_000),
    st.integers(0, 5_000),
    st.integers(0, 200_000),
    st.integers(0, 20_000),
    st.integers(0, 20_000),
)


def _group(calls: list[Usage]) -> tuple[UsageGroup, int]:
    """The calls as the ledger keeps them: summed columns and the sum of their charges."""
    charged = 0
    for usage in calls:
        charge = PRICE.charge(usage, AT)
        assert charge is not None
        charged += int(charge)
    sums = {name: sum(getattr(u, name) for u in calls) for name in TOKEN_COLUMNS}
    rates = {
        k: str(getattr(PRICE, k))
        for k in ("input", "cached_input", "cache_write", "output", "reasoning")
    }
    return UsageGroup(
        "m", json.dumps({"rates": "row", **rates}), len(calls), sums, charged
    ), charged


@settings(max_examples=60, deadline=None)
@given(calls=st.lists(usages, min_size=1, max_size=30))
def test_lines_add_up_to_the_charges_and_follow_quantity_times_price(calls: list[Usage]) -> None:
    group, charged = _group(calls)
    lines = usage_lines(group)
    assert sum(int(line.amount) for line in lines) == charged
    plain_in = sum(u.prompt_tokens - u.cached_tokens - u.cache_write_tokens for u in calls)
    want = {
        "input": plain_in,
        "cached_input": sum(u.cached_tokens for u in calls),
        "cache_write": sum(u.cache_write_tokens for u in calls),
        "output": sum(u.completion_tokens - u.reasoning_tokens for u in calls),
        "reasoning": sum(u.reasoning_tokens for u in calls),
    }
    assert {line.kind: line.quantity for line in lines} == {k: v for k, v in want.items() if v}
    for line in lines:
        assert line.unit_price == getattr(PRICE, line.kind)
        exact = Fraction(line.quantity) * Fraction(line.unit_price)
        # each call was rounded once (at most half a micro-dollar), then the split adds < 1
        assert abs(Fraction(int(line.amount)) - exact) < len(calls) + 1


def test_merge_joins_one_model_kind_and_price() -> None:
    one, _ = _group([Usage(prompt_tokens=1000, completion_tokens=10)])
    two, _ = _group([Usage(prompt_tokens=3000, completion_tokens=30)])
    merged = merge([*usage_lines(one), *usage_lines(two)])
    assert [(x.kind, x.quantity) for x in merged] == [("input", 4000), ("output", 40)]


def test_a_document_whose_lines_do_not_add_up_is_refused() -> None:
    group, charged = _group([Usage(prompt_tokens=1000, completion_tokens=10)])
    fields = dict(
        number="INV-000001", account_id="a", month="2025-03", start=AT, end=AT, issued_at=AT,
        issuer=Party("Us"), customer=Party("a"), lines=tuple(usage_lines(group)), prepaid=0,
    )  # fmt: skip
    assert InvoiceDocument(total=charged, **fields).amount_due == charged  # type: ignore[arg-type]
    with pytest.raises(InvoiceError, match="add up"):
        InvoiceDocument(total=charged + 1, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("total", "prepaid", "applied", "due"),
    [(500, 1000, 500, 0), (500, 200, 200, 300), (500, -50, 0, 500), (0, 100, 0, 0)],
)
def test_credits_applied_and_amount_due(total: int, prepaid: int, applied: int, due: int) -> None:
    doc = InvoiceDocument(
        number="INV-1", account_id="a", month="2025-03", start=AT, end=AT, issued_at=AT,
        issuer=Party("Us"), customer=Party("a"),
        lines=(usage_lines(UsageGroup("m", None, 1, {}, total))), total=total, prepaid=prepaid,
    )  # type: ignore[arg-type]  # fmt: skip
    assert (doc.credits_applied, doc.amount_due) == (applied, due)


def test_usd_shows_cents_and_the_micro_dollars_it_needs() -> None:
    assert [usd(x) for x in (12_500_000, 41, -41, 0, 1_234_567)] == [
        "12.50", "0.000041", "-0.000041", "0.00", "1.234567",
    ]  # fmt: skip
