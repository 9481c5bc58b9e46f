"""The invoice's lines split what the calls were charged, to the micro-dollar (issue 39, point 1).

Oracles, independent of ``invoice_model``: the calls' charge is ``Price.charge``, the one charge
function the worker bills with, per call; a line's expected amount is quantity x unit price in
exact fractions; ``allocate`` is checked against exact proportional shares.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.prices import Price, load_price_book
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


def test_late_usage_after_a_resolution_is_an_adjustment_not_tokens_twice(session: Any) -> None:
    """A call charged its estimate in March whose usage came in April: March bills the estimate,
    April the difference (an adjustment, 1 call); a call released in March and charged late in
    April is April's usage, its tokens once. Oracle: the charges the test posted."""
    from ledger.factories import make_meta, settled, unsettled

    from worker.ledger.operations import apply_result, hold, resolve
    from worker.reports.invoice_query import content

    grace = timedelta(hours=1)
    book = load_price_book()
    account = f"late-{uuid.uuid4().hex[:8]}"
    march, april = datetime(2031, 3, 28, tzinfo=UTC), datetime(2031, 4, 2, tzinfo=UTC)
    usages = {"est": Usage(prompt_tokens=5_000, completion_tokens=900),
              "rel": Usage(prompt_tokens=700, completion_tokens=60, cached_tokens=100)}  # fmt: skip
    charges = {}
    for name, action in (("est", "charge_estimate"), ("rel", "release")):
        rid = f"{account}-{name}"
        hold(session, make_meta(rid, account_id=account, created_at=march), now=march)
        apply_result(session, unsettled(rid, account_id=account, created_at=march, exposure=3_000),
                     now=march, grace=grace)  # fmt: skip
        resolve(session, rid, action, who="policy", note="grace", now=march + 3 * grace)
        charge = book.charge("gpt-4o-mini", usages[name], march)
        quote = book.quote("gpt-4o-mini", usages[name], march)
        assert charge is not None and quote is not None
        charges[name] = int(charge)
        late = settled(rid, account_id=account, created_at=march, usage=usages[name],
                       charge=int(charge), unit_prices=json.dumps(quote))  # fmt: skip
        assert apply_result(session, late, now=april, grace=grace, closed=True) == "charged_late"
    session.flush()
    start = datetime(2031, 3, 1, tzinfo=UTC)
    first = content(session, account, start, datetime(2031, 4, 1, tzinfo=UTC))
    assert [(x.kind, x.quantity, int(x.amount)) for x in first.lines] == [("estimate", 1, 3_000)]
    assert first.total == 3_000
    second = content(
        session, account, datetime(2031, 4, 1, tzinfo=UTC), datetime(2031, 5, 1, tzinfo=UTC)
    )
    assert second.total == charges["est"] - 3_000 + charges["rel"]
    assert sum(int(x.amount) for x in second.lines) == second.total
    by_kind = {x.kind: x for x in second.lines}
    assert (by_kind["adjustment"].quantity, int(by_kind["adjustment"].amount)) == (
        1, charges["est"] - 3_000,
    )  # fmt: skip
    rel = usages["rel"]
    assert by_kind["input"].quantity == rel.prompt_tokens - rel.cached_tokens
    assert by_kind["cached_input"].quantity == rel.cached_tokens
    assert by_kind["output"].quantity == rel.completion_tokens
