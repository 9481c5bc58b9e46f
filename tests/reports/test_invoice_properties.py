"""Every invoice line's amount is quantity x unit price, and total = subtotal + tax - credits
applied, over random ledgers on both engines (issue 52, acceptance): hypothesis posts calls priced
by the bundled price book (their usage and rates recorded), calls resolved by charging their
estimate, credits and reversals, at random moments over three months, and a random tax rate.

Oracles, the test's own: each line's amount from exact fractions rounded half-up here; the subtotal
is the charges the test posted in the month; credits are the prepaid funds summed from what the
test posted; tax the subtotal x rate rounded here.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger.factories import make_meta, settled, unsettled
from sqlalchemy.orm import Session

from worker.core.money import Micros
from worker.core.prices import load_price_book
from worker.core.result import Usage
from worker.ledger.credits import credit, reverse
from worker.ledger.operations import apply_result, hold, resolve
from worker.reports.invoice_model import Party, TaxTerms, build_invoice
from worker.reports.invoice_query import content
from worker.reports.statement_query import parse_month

BOOK = load_price_book()
GRACE = timedelta(hours=1)
BASE = datetime(2033, 1, 1, tzinfo=UTC)
MONTHS = ("2033-01", "2033-02", "2033-03")
MODELS = ("gpt-4o-mini", "gpt-4o")
SCALE = {"tokens": 1, "requests": 1_000_000, "calls": 1_000_000, "items": 1_000_000}

usage = st.builds(
    lambda cached, plain, out: Usage(
        prompt_tokens=cached + plain, completion_tokens=out, cached_tokens=cached
    ),
    st.integers(0, 30_000),
    st.integers(0, 90_000),
    st.integers(0, 9_000),
)
operation = st.one_of(
    st.tuples(st.just("call"), st.sampled_from(MODELS), usage),
    st.tuples(st.just("estimate"), st.sampled_from(MODELS), st.integers(1, 50_000)),
    st.tuples(st.just("credit"), st.integers(1, 3_000_000)),
    st.tuples(st.just("reverse"), st.integers(0, 5)),
)
timed = st.tuples(st.integers(0, 60 * 24 * 85), operation)


def half_up(exact: Fraction) -> int:
    sign = -1 if exact < 0 else 1
    return sign * int(abs(exact) + Fraction(1, 2))


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(timed, min_size=1, max_size=25),
    rate=st.sampled_from([None, "20", "8.875", "0"]),
)
def test_lines_multiply_and_totals_add_up(session: Session, ops: list, rate: str | None) -> None:
    account = f"ip{uuid.uuid4().hex[:8]}"
    credit(session, account, Micros(1), key=f"{account}-open", note="open", who="t",
           now=BASE - timedelta(days=1), new_account=True)  # fmt: skip
    money: list[tuple[datetime, str, int]] = [(BASE - timedelta(days=1), "fund", 1)]
    credits: list[tuple[str, int]] = []
    for n, (minute, op) in enumerate(sorted(ops, key=lambda item: item[0])):
        at = BASE + timedelta(minutes=minute, seconds=n)
        rid = f"{account}-r{n}"
        if op[0] == "call":
            charge, quote = BOOK.charge(op[1], op[2], at), BOOK.quote(op[1], op[2], at)
            assert charge is not None and quote is not None
            hold(session, make_meta(rid, account_id=account, model=op[1], reserved=1_000,
                                    created_at=at), now=at)  # fmt: skip
            apply_result(session, settled(rid, account_id=account, model=op[1], usage=op[2],
                                          charge=int(charge), reserved=1_000, created_at=at,
                                          unit_prices=json.dumps(quote)), now=at, grace=GRACE)  # fmt: skip
            money.append((at, "charge", int(charge)))
        elif op[0] == "estimate":
            hold(session, make_meta(rid, account_id=account, model=op[1], reserved=op[2],
                                    created_at=at), now=at)  # fmt: skip
            apply_result(session, unsettled(rid, account_id=account, model=op[1],
                                            reserved=op[2], exposure=op[2], created_at=at),
                         now=at, grace=GRACE)  # fmt: skip
            resolve(session, rid, "charge_estimate", who="t", note="t", now=at)
            money.append((at, "charge", op[2]))
        elif op[0] == "credit":
            key = f"{account}-k{n}"
            credit(session, account, Micros(op[1]), key=key, note="t", who="t", now=at)
            credits.append((key, op[1]))
            money.append((at, "fund", op[1]))
        elif credits:
            key, amount = credits.pop(op[1] % len(credits))
            reverse(session, key, note="t", who="t", now=at)
            money.append((at, "fund", -amount))
    session.flush()
    terms = TaxTerms(None if rate is None else Decimal(rate))
    for month in MONTHS:
        start, end = parse_month(month)
        found = content(session, account, start, end)
        doc = build_invoice(
            lines=found.lines, credits=found.credits, tax_terms=terms, subtotal=found.subtotal,
            number="T-1", account_id=account, month=month, start=start, end=end,
            issued_at=end, due_date=None, issuer=Party("us"), customer=Party("x"),
        )  # fmt: skip
        for line in doc.lines:
            exact = Fraction(line.quantity) * Fraction(line.unit_price) * SCALE[line.unit]
            assert int(line.amount) == half_up(exact), line
        charged = sum(a for at, kind, a in money if kind == "charge" and start <= at < end)
        assert doc.subtotal == charged == sum(int(line.amount) for line in doc.lines)
        tax = 0 if rate is None else half_up(Fraction(charged) * Fraction(rate) / 100)
        assert doc.tax == tax
        prepaid = sum(a for at, kind, a in money if kind == "fund" and at < end) - sum(
            a for at, kind, a in money if kind == "charge" and at < start
        )
        assert doc.prepaid == prepaid
        applied = max(0, min(charged + tax, prepaid))
        assert doc.credits_applied == applied
        assert doc.total == charged + tax - applied
