"""Statements tie out, whatever the ledger holds: a hypothesis test builds it by random operations
(credits, reversals, holds, settles below and above the hold, voids, failures, late settles,
resolutions by release and by charging the estimate) at random moments over three months, each
under freezegun's clock, on both engines; then every month's statement must tie out, and agree with
an oracle summed in Python from the raw entries (nothing of the statement's or the balance query's
code)."""

from __future__ import annotations

import contextlib
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from freezegun import freeze_time
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger.factories import make_meta, make_result
from sqlalchemy import select
from sqlalchemy.orm import Session

from models import Entry, Failure, LedgerAccount, Reservation, Transaction
from worker.core.errors import LedgerError
from worker.core.money import Micros
from worker.core.result import Outcome, Reason, UsageSource
from worker.ledger.credits import credit, reverse
from worker.ledger.operations import apply_result, hold, resolve
from worker.reports.spec import ReportError
from worker.reports.statement_query import build_statement, parse_month

GRACE = timedelta(hours=1)
BASE = datetime(2032, 1, 25, tzinfo=UTC)  # five weeks either side of 2032-02
MONTHS = ("2032-01", "2032-02", "2032-03")
SPAN_MINUTES = 60 * 24 * 45

operation = st.one_of(
    st.tuples(st.just("credit"), st.integers(1, 5_000_000)),
    st.tuples(st.just("reverse"), st.integers(0, 5)),
    st.tuples(
        st.just("hold"),
        st.sampled_from([0, 1, 999, 10_000, 2_000_000]),
        st.sampled_from(["m-a", "m-b"]),
    ),
    st.tuples(st.just("settle"), st.integers(0, 9), st.integers(0, 30_000)),
    st.tuples(st.just("settle_estimated"), st.integers(0, 9), st.integers(0, 30_000)),
    st.tuples(st.just("void"), st.integers(0, 9)),
    st.tuples(st.just("fail"), st.integers(0, 9), st.integers(0, 30_000)),
    st.tuples(
        st.just("resolve"), st.integers(0, 9), st.sampled_from(["release", "charge_estimate"])
    ),
)
timed = st.tuples(st.integers(0, SPAN_MINUTES), st.integers(0, 1), operation)


def apply(session: Session, prefix: str, ops: list) -> None:
    """The operations in time order, each at its moment under freezegun's clock."""
    credits: list[str] = []
    calls: list[dict] = []
    # One frozen clock, moved to each operation's moment (entering freeze_time per operation
    # re-patches every loaded module: slow). Hypothesis reads its own clock.
    with freeze_time(BASE, ignore=["hypothesis"]) as clock:
        for n, (minute, who, op) in enumerate(sorted(ops, key=lambda item: item[0])):
            clock.move_to(BASE + timedelta(minutes=minute, seconds=n))
            _apply_one(session, prefix, n, f"{prefix}-{who}", op, credits, calls)


def _apply_one(
    session: Session, prefix: str, n: int, account: str, op: tuple, credits: list, calls: list
) -> None:
    """One operation at the frozen clock's moment; one that the ledger refuses is a bug, except
    a resolution of a call that is not (or no longer) unsettled."""
    now = datetime.now(UTC)
    kind = op[0]
    if kind == "credit":
        key = f"{prefix}-k{n}"
        credit(
            session, account, Micros(op[1]), key=key, note="t", who="t", now=now, new_account=True
        )
        credits.append(key)
    elif kind == "reverse":
        if credits:
            key = credits[op[1] % len(credits)]
            reverse(session, key, note="t", who="t", now=now)
    elif kind == "hold":
        call = {
            "request_id": f"{prefix}-r{n}",
            "account_id": account,
            "reserved": op[1],
            "model": op[2],
            "created_at": now,
        }
        hold(
            session,
            make_meta(call["request_id"], **{k: v for k, v in call.items() if k != "request_id"}),
            now=now,
        )
        calls.append(call)
    elif calls:
        call = calls[op[1] % len(calls)]
        rid = call["request_id"]
        common = {k: v for k, v in call.items() if k != "request_id"}
        if kind in ("settle", "settle_estimated"):
            source = {} if kind == "settle" else {"usage_source": UsageSource.ESTIMATED}
            apply_result(
                session,
                make_result(rid, charge=op[2], **common, **source),
                now=now,
                grace=GRACE,
            )
        elif kind == "void":
            apply_result(
                session,
                make_result(rid, outcome=Outcome.VOID, usage=None, **common),
                now=now,
                grace=GRACE,
            )
        elif kind == "fail":
            failed = make_result(
                rid,
                outcome=Outcome.UNSETTLED,
                reason=Reason.MISSING_USAGE,
                exposure=op[2],
                **common,
            )
            apply_result(session, failed, now=now, grace=GRACE)
        else:
            # Not unsettled, or resolved already: refused, and nothing changed.
            with contextlib.suppress(LedgerError):
                resolve(session, rid, op[2], who="t", note="t", now=now)


def raw_entries(session: Session, prefix: str) -> list:
    """Every entry touching the example's accounts, with what the oracle needs, straight from the
    tables: (created_at, transaction kind, ledger kind, owner, reservation's account, request id,
    signed amount). A flagged ``charge`` (a call charged late, after its hold was resolved) is
    kind ``late_charge``: money beyond the hold, like a true-up, and never a hold released."""
    e, t, la, r = Entry, Transaction, LedgerAccount, Reservation
    rows = session.execute(
        select(
            t.created_at,
            t.kind,
            t.flagged,
            la.kind,
            la.account_id,
            r.account_id,
            r.request_id,
            e.direction,
            e.amount,
        )
        .join(t, t.id == e.transaction_id)
        .join(la, la.id == e.ledger_account_id)
        .outerjoin(r, r.id == t.reservation_id)
    ).all()
    return [
        (at, "late_charge" if tk == "charge" and flagged else tk, lk, owner, racct, rid,
         amount if direction == "credit" else -amount)
        for at, tk, flagged, lk, owner, racct, rid, direction, amount in rows
        if (owner or racct or "").startswith(prefix)
    ]  # fmt: skip


def oracle_position(rows: list, account: str, before: datetime) -> dict:
    pos = defaultdict(int)
    for at, tk, lk, owner, racct, _, amount in rows:
        if at >= before:
            continue
        if owner == account:
            pos[lk] += amount
            if lk == "available" and tk == "fund":
                pos["funded"] += amount
        if lk == "revenue" and racct == account:
            pos["charged"] += amount
    return {
        "funded": pos["funded"],
        "charged": pos["charged"],
        "held": pos["held"],
        "available": pos["available"],
    }


def oracle_movements(rows: list, account: str, start: datetime, end: datetime) -> dict:
    found = defaultdict(int)
    by_day_model: dict = defaultdict(int)
    for at, tk, lk, owner, racct, _, amount in rows:
        if not start <= at < end:
            continue
        if owner == account and lk == "available" and tk == "fund":
            found["credited"] += amount
        if owner == account and lk == "held" and tk == "hold" and amount > 0:
            found["holds"] += amount
        if (
            owner == account
            and lk == "available"
            and tk not in ("fund", "late_charge")
            and amount > 0
        ):
            found["released"] += amount
        if lk == "revenue" and racct == account:
            found["charged"] += amount
            found["true_ups"] += amount if tk in ("true_up", "late_charge") else 0
            by_day_model[at.date()] += amount
    found["by_day"] = {day: amount for day, amount in by_day_model.items() if amount}
    return found


def oracle_still_held(rows: list, account: str, before: datetime) -> set[str]:
    """Request ids of the account whose hold still held money at ``before``."""
    held = defaultdict(int)
    for at, _, lk, owner, _, rid, amount in rows:
        if at < before and owner == account and lk == "held":
            held[rid] += amount
    return {rid for rid, amount in held.items() if amount > 0}


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(timed, min_size=1, max_size=25))
def test_every_statement_ties_out_against_the_raw_entries(session: Session, ops: list) -> None:
    prefix = f"st{uuid.uuid4().hex[:8]}"
    apply(session, prefix, ops)
    rows = raw_entries(session, prefix)
    failed = {
        rid: detected
        for rid, detected in session.execute(
            select(Reservation.request_id, Failure.detected_at)
            .join(Failure, Failure.reservation_id == Reservation.id)
            .where(Reservation.request_id.startswith(prefix))
        )
    }
    now = BASE + timedelta(minutes=SPAN_MINUTES + 1)
    for who in (0, 1):
        account = f"{prefix}-{who}"
        closing_of_previous = None
        for month in MONTHS:
            s = build_statement(session, account, month, now=now)
            assert s.ties_out, s.differences
            start, _ = parse_month(month)
            for moment, position in ((start, s.opening), (s.as_of, s.closing)):
                expected = oracle_position(rows, account, moment)
                got = {name: int(getattr(position, name)) for name in expected}
                assert got == expected
            moved = oracle_movements(rows, account, start, s.as_of)
            assert int(s.credited) == moved["credited"]
            assert int(s.charged) == moved["charged"]
            assert int(s.true_ups) == moved["true_ups"]
            assert int(s.holds) == moved["holds"]
            assert int(s.released) == moved["released"]
            by_day = defaultdict(int)
            for row in s.charges:
                by_day[row.day] += int(row.total)
            assert {d: a for d, a in by_day.items() if a} == moved["by_day"]
            still = oracle_still_held(rows, account, s.as_of)
            assert {f.request_id for f in s.open_failures if f.held > 0} == {
                rid for rid in still if rid in failed and failed[rid] < s.as_of
            }
            if closing_of_previous is not None:
                assert s.opening == closing_of_previous
            closing_of_previous = s.closing


def test_a_known_month(session: Session) -> None:
    """Pinned figures: funded 10.00, one call held 0.01 and charged 0.0125 (a true-up of 0.0025)
    in February, one call failed in February and still open at its end, a reversal in March."""
    prefix = f"sk{uuid.uuid4().hex[:8]}"
    account = f"{prefix}-0"
    feb = datetime(2032, 2, 10, tzinfo=UTC)
    credit(
        session,
        account,
        Micros(10_000_000),
        key=f"{prefix}-k",
        note="inv 1",
        who="t",
        now=feb - timedelta(days=20),
        new_account=True,
    )
    meta = make_meta(f"{prefix}-r1", account_id=account, reserved=10_000, created_at=feb)
    hold(session, meta, now=feb)
    apply_result(
        session,
        make_result(f"{prefix}-r1", account_id=account, charge=12_500, created_at=feb),
        now=feb,
        grace=GRACE,
    )
    hold(
        session,
        make_meta(f"{prefix}-r2", account_id=account, reserved=3_000, created_at=feb),
        now=feb,
    )
    apply_result(
        session,
        make_result(
            f"{prefix}-r2",
            account_id=account,
            reserved=3_000,
            outcome=Outcome.UNSETTLED,
            created_at=feb,
        ),
        now=feb,
        grace=GRACE,
    )
    reverse(session, f"{prefix}-k", note="refund", who="t", now=datetime(2032, 3, 2, tzinfo=UTC))
    s = build_statement(session, account, "2032-02", now=datetime(2032, 4, 1, tzinfo=UTC))
    assert s.ties_out and s.complete
    assert (s.opening.balance, s.credited, s.charged, s.closing.balance) == (
        10_000_000,
        0,
        12_500,
        9_987_500,
    )
    assert (s.closing.held, s.closing.available) == (3_000, 9_984_500)
    [row] = s.charges
    assert (row.day.isoformat(), row.model, row.calls) == ("2032-02-10", "gpt-4o-mini", 1)
    assert (row.money["reported"], row.money["true_ups"]) == (10_000, 2_500)
    assert [f.request_id for f in s.open_failures] == [f"{prefix}-r2"]
    march = build_statement(session, account, "2032-03", now=datetime(2032, 3, 15, tzinfo=UTC))
    assert not march.complete and march.ties_out
    assert [(c.kind, c.key, int(c.amount)) for c in march.credits] == [
        ("reversal", f"{prefix}-k", -10_000_000)
    ]
    assert march.closing.balance == -12_500


@pytest.mark.parametrize("month", ["2032-13", "2032-1", "32-01", "2032-00", "next"])
def test_bad_months(month: str) -> None:
    with pytest.raises(ReportError, match="YYYY-MM"):
        parse_month(month)


def test_month_bounds() -> None:
    assert parse_month("2032-12") == (
        datetime(2032, 12, 1, tzinfo=UTC),
        datetime(2033, 1, 1, tzinfo=UTC),
    )
