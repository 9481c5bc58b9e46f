"""The invoice's lines state quantity x unit price, and a rounding line makes them add up to what
the calls were charged, to the micro-dollar (issues 39 and 52).

Oracles, independent of ``invoice_model``: the calls' charge is ``Price.charge``, the one charge
function the worker bills with, per call; a line's expected amount is quantity x unit price in
exact fractions, rounded half-up here.
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

from worker.core.money import Micros
from worker.core.prices import Price, load_price_book
from worker.core.result import Usage
from worker.reports.invoice_model import (
    TOKEN_COLUMNS,
    CreditEntry,
    InvoiceError,
    Line,
    Party,
    TaxTerms,
    UsageGroup,
    build_invoice,
    charge_lines,
    usage_items,
    usd,
)

AT = datetime(2025, 3, 10, tzinfo=UTC)
# Rates with more digits than a micro-dollar, so per-call rounding differs from the exact sums.
PRICE = Price(
    model="m", effective_from=datetime(2020, 1, 1, tzinfo=UTC), input=Decimal("0.15"),
    cached_input=Decimal("0.075"), output=Decimal("0.6"), reasoning=Decimal("2.4375"),
    cache_write=Decimal("0.1875"),
)  # fmt: skip


def half_up(exact: Fraction) -> int:
    """The nearest integer, halves away from zero."""
    sign = -1 if exact < 0 else 1
    return sign * int(abs(exact) + Fraction(1, 2))


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
def test_lines_are_quantity_times_price_and_a_rounding_line_ties_them(calls: list[Usage]) -> None:
    group, charged = _group(calls)
    lines = charge_lines(usage_items(group), charged)
    assert sum(int(line.amount) for line in lines) == charged
    plain_in = sum(u.prompt_tokens - u.cached_tokens - u.cache_write_tokens for u in calls)
    want = {
        "input": plain_in,
        "cached_input": sum(u.cached_tokens for u in calls),
        "cache_write": sum(u.cache_write_tokens for u in calls),
        "output": sum(u.completion_tokens - u.reasoning_tokens for u in calls),
        "reasoning": sum(u.reasoning_tokens for u in calls),
    }
    priced = [line for line in lines if line.kind != "rounding"]
    assert {line.kind: line.quantity for line in priced} == {k: v for k, v in want.items() if v}
    for line in priced:
        assert line.unit_price == getattr(PRICE, line.kind)
        assert int(line.amount) == half_up(Fraction(line.quantity) * Fraction(line.unit_price))
    rounding = [line for line in lines if line.kind == "rounding"]
    assert len(rounding) <= 1
    for line in rounding:  # each call rounded once (<= 1/2), each line once (<= 1/2)
        assert abs(int(line.amount)) <= (len(calls) + len(priced)) / 2
        assert Fraction(line.unit_price) * 1_000_000 == int(line.amount)


def test_merge_joins_one_model_kind_and_price() -> None:
    one, c1 = _group([Usage(prompt_tokens=1000, completion_tokens=10)])
    two, c2 = _group([Usage(prompt_tokens=3000, completion_tokens=30)])
    merged = charge_lines([*usage_items(one), *usage_items(two)], c1 + c2)
    assert [(x.kind, x.quantity) for x in merged] == [("input", 4000), ("output", 40)]


def _doc(lines: list[Line], subtotal: int, prepaid: int, terms: TaxTerms | None = None) -> Any:
    return build_invoice(
        lines=lines, credits=[CreditEntry("balance", None, "", "b", Micros(prepaid))],
        tax_terms=terms or TaxTerms(), subtotal=Micros(subtotal), number="INV-000001", account_id="a",
        month="2025-03", start=AT, end=AT, issued_at=AT, due_date=None, issuer=Party("Us"),
        customer=Party("a"),
    )  # fmt: skip


def test_a_document_whose_lines_do_not_add_up_or_multiply_is_refused() -> None:
    group, charged = _group([Usage(prompt_tokens=1000, completion_tokens=10)])
    lines = charge_lines(usage_items(group), charged)
    assert _doc(lines, charged, 0).total == charged
    with pytest.raises(InvoiceError, match="add up"):
        _doc(lines, charged + 1, 0)
    wrong = Line("m", "input", "m: input", 10, "tokens", Decimal("0.15"), Micros(3))
    with pytest.raises(InvoiceError, match=r"is not 10 x 0\.15"):
        _doc([wrong], 3, 0)


@pytest.mark.parametrize(
    ("total", "prepaid", "applied", "due"),
    [(500, 1000, 500, 0), (500, 200, 200, 300), (500, -50, 0, 500), (0, 100, 0, 0)],
)
def test_credits_applied_and_amount_due(total: int, prepaid: int, applied: int, due: int) -> None:
    lines = charge_lines(usage_items(UsageGroup("m", None, 1, {}, total)), total)
    doc = _doc(lines, total, prepaid)
    assert (doc.credits_applied, doc.total) == (applied, due)


@pytest.mark.parametrize(
    ("terms", "tax"),
    [
        (TaxTerms(Decimal("20")), 200_001),  # 1,000,005 x 20% = 200,001
        (TaxTerms(Decimal("8.875")), 88_750),  # 1,000,005 x 8.875% = 88,750.44375
        (TaxTerms(Decimal("20"), reverse_charge=True), 0),
        (TaxTerms(), 0),
    ],
)
def test_tax_is_the_subtotal_times_the_rate_rounded_once(terms: TaxTerms, tax: int) -> None:
    lines = charge_lines(usage_items(UsageGroup("m", None, 1, {}, 1_000_005)), 1_000_005)
    doc = _doc(lines, 1_000_005, 50_000, terms)
    assert doc.tax == tax
    assert doc.total == 1_000_005 + tax - 50_000


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
    assert first.subtotal == 3_000
    second = content(
        session, account, datetime(2031, 4, 1, tzinfo=UTC), datetime(2031, 5, 1, tzinfo=UTC)
    )
    assert second.subtotal == charges["est"] - 3_000 + charges["rel"]
    assert sum(int(x.amount) for x in second.lines) == second.subtotal
    by_kind = {x.kind: x for x in second.lines}
    assert (by_kind["adjustment"].quantity, int(by_kind["adjustment"].amount)) == (
        1, charges["est"] - 3_000,
    )  # fmt: skip
    rel = usages["rel"]
    assert by_kind["input"].quantity == rel.prompt_tokens - rel.cached_tokens
    assert by_kind["cached_input"].quantity == rel.cached_tokens
    assert by_kind["output"].quantity == rel.completion_tokens
