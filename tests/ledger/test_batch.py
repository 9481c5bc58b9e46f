"""The batched hot path leaves exactly the ledger the per-call operations would.

Each example builds a random mix of holds and results (common path, duplicates, true-ups, failures,
voids, unpriced, results before their hold), applies it once through ``batch.apply_common`` with the
per-call operations for whatever it hands back, and once through the per-call operations alone, in
two fresh sets of request ids; the two ledgers must have the same digest.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session

from models import AlertEvent, Anomaly, Entry, Failure, Reservation, Transaction, UsageRecord
from worker.core.result import Outcome, Reason
from worker.ledger.balances import ledger_is_balanced
from worker.ledger.batch import apply_common
from worker.ledger.findings import columns_of, record_findings, record_findings_many
from worker.ledger.operations import apply_result, hold

from .factories import T0, make_meta, make_result

GRACE = timedelta(hours=1)
_runs = itertools.count()

step = st.tuples(
    st.sampled_from(["hold", "settle", "settle_over", "unpriced", "fail", "void", "hold_zero"]),
    st.integers(0, 5),  # which request
    st.booleans(),  # hold first?
)


def digest(session: Session, prefix: str) -> list[tuple]:
    """The ledger of the requests named ``prefix…``, without ids or timestamps."""
    rows = session.execute(
        select(
            Reservation.request_id,
            Reservation.status,
            Reservation.reserved_micros,
            Transaction.kind,
            Transaction.flagged,
            Entry.direction,
            Entry.amount,
        )
        .outerjoin(Transaction, Transaction.reservation_id == Reservation.id)
        .outerjoin(Entry, Entry.transaction_id == Transaction.id)
        .where(Reservation.request_id.like(f"{prefix}%"))
    ).all()
    usage = session.execute(
        select(Reservation.request_id, UsageRecord.charge_micros, UsageRecord.usage_source)
        .join(UsageRecord, UsageRecord.reservation_id == Reservation.id)
        .where(Reservation.request_id.like(f"{prefix}%"))
    ).all()
    failures = session.execute(
        select(Reservation.request_id, Failure.reason, Failure.exposure_micros)
        .join(Failure, Failure.reservation_id == Reservation.id)
        .where(Reservation.request_id.like(f"{prefix}%"))
    ).all()

    def strip(rid: str) -> str:
        return rid[len(prefix) :]

    return sorted(
        [("r", strip(r[0]), *map(str, r[1:])) for r in rows]
        + [("u", strip(r[0]), *map(str, r[1:])) for r in usage]
        + [("f", strip(r[0]), *map(str, r[1:])) for r in failures]
    )


def build(prefix: str, steps: list[tuple[str, int, bool]]):
    holds, results, amounts = {}, {}, {}
    for kind, n, hold_first in steps:
        rid = f"{prefix}{n}"
        account = f"{prefix.split('-')[0]}-acct{n % 2}"
        reserved = amounts.setdefault(rid, 0 if kind == "hold_zero" else 1_000)
        meta = make_meta(rid, account_id=account, reserved=reserved)
        if hold_first or kind in ("hold", "hold_zero"):
            holds.setdefault(rid, meta)
        if kind in ("hold", "hold_zero"):
            continue
        common = {"account_id": account, "reserved": reserved}
        if kind == "settle":
            result = make_result(rid, charge=400, **common)
        elif kind == "settle_over":
            result = make_result(rid, charge=1_500, **common)
        elif kind == "unpriced":
            result = make_result(rid, charge=None, **common)
        elif kind == "fail":
            result = make_result(rid, outcome=Outcome.UNSETTLED, reason=Reason.INCOMPLETE, **common)
        else:
            result = make_result(rid, outcome=Outcome.VOID, **common)
        results.setdefault(rid, result)
    return list(holds.values()), list(results.values())


def per_call(session: Session, holds, results) -> None:
    for meta in holds:
        hold(session, meta, now=T0)
    for result in results:
        apply_result(session, result, now=T0, grace=GRACE)


def batched(session: Session, holds, results) -> None:
    with session.begin_nested():
        applied = apply_common(session, holds, results, now=T0)
    for meta in holds:
        if meta.request_id not in applied.held:
            hold(session, meta, now=T0)
    for result in results:
        if result.request_id not in applied.settled and result.request_id not in applied.unsettled:
            apply_result(session, result, now=T0, grace=GRACE)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, min_size=1, max_size=12))
def test_batched_ledger_equals_per_call_ledger(session: Session, steps) -> None:
    run = next(_runs)
    a, b = f"a{run}-", f"b{run}-"
    per_call(session, *build(a, steps))
    batched(session, *build(b, steps))
    assert digest(session, a) == digest(session, b)
    assert ledger_is_balanced(session)


def test_common_path_takes_fresh_holds_and_plain_settlements(session: Session) -> None:
    holds = [make_meta(f"c-{i}", account_id="c-acct") for i in range(3)]
    results = [make_result(f"c-{i}", account_id="c-acct", charge=100 * i) for i in range(2)]
    results.append(make_result("c-2", account_id="c-acct", charge=20_000))  # above the hold
    results.append(make_result("c-3", account_id="c-acct", charge=None))  # unpriced
    applied = apply_common(session, holds, results, now=T0)
    assert applied.held == {"c-0", "c-1", "c-2"}
    assert set(applied.settled) == {"c-0", "c-1", "c-2"}  # the true-up too; unpriced is not taken
    again = apply_common(session, holds, results, now=T0)
    assert not again.held and not again.settled  # duplicates are never taken


def test_common_path_marks_held_calls_unsettled_with_their_exposure(session: Session) -> None:
    holds = [make_meta(f"u-{i}", account_id="u-acct") for i in range(2)]
    results = [
        make_result("u-0", account_id="u-acct", outcome=Outcome.UNSETTLED, exposure=3_000),
        make_result("u-1", account_id="u-acct", outcome=Outcome.UNSETTLED,
                    reason=Reason.UNPRICED, exposure=3_000),
        # No hold anywhere: the per-call path records it first, so it is not taken here.
        make_result("u-2", account_id="u-acct", outcome=Outcome.UNSETTLED),
    ]  # fmt: skip
    applied = apply_common(session, holds, results, now=T0)
    assert set(applied.unsettled) == {"u-0", "u-1"}
    assert not applied.settled
    rows = dict(
        session.execute(
            select(Reservation.request_id, Failure.exposure_micros)
            .join(Failure, Failure.reservation_id == Reservation.id)
            .where(Reservation.request_id.like("u-%"))
        ).all()
    )
    assert rows == {"u-0": 3_000, "u-1": None}  # an unpriced model's estimate has no price
    statuses = set(
        session.scalars(
            select(Reservation.status).where(Reservation.request_id.in_(["u-0", "u-1"]))
        )
    )
    assert statuses == {"unsettled"}
    again = apply_common(session, holds, results, now=T0)
    assert not again.unsettled  # an unsettled reservation is never marked twice
    assert ledger_is_balanced(session)


def _findings_digest(session: Session, prefix: str) -> list[tuple]:
    """Fingerprints, output hashes, drift, anomalies and alert events of ``prefix…``, without ids."""
    reservations = Reservation.__table__
    usage = UsageRecord.__table__
    rows = session.execute(
        select(
            reservations.c.request_id,
            reservations.c.fingerprint,
            usage.c.output_hash,
            usage.c.drift_ppm,
        )
        .select_from(reservations.outerjoin(usage, usage.c.reservation_id == reservations.c.id))
        .where(reservations.c.request_id.like(f"{prefix}%"))
    ).all()
    kinds = session.execute(
        select(reservations.c.request_id, Anomaly.kind)
        .join(Anomaly, Anomaly.reservation_id == reservations.c.id)
        .where(reservations.c.request_id.like(f"{prefix}%"))
    ).all()
    events = session.execute(
        select(reservations.c.request_id, AlertEvent.reason)
        .join(AlertEvent, AlertEvent.reservation_id == reservations.c.id)
        .where(reservations.c.request_id.like(f"{prefix}%"))
    ).all()
    strip = len(prefix)
    return sorted(
        [("r", r[0][strip:], *map(str, r[1:])) for r in rows]
        + [("a", r[0][strip:], str(r[1])) for r in kinds]
        + [("e", r[0][strip:], str(r[1])) for r in events]
    )


def test_batched_findings_equal_per_call_findings(session: Session) -> None:
    """What the consumer's batched path records beyond money (fingerprints and output hashes
    written with the rows, anomalies, alert events) equals what record_findings records per call."""
    salt = "test-salt"
    run = next(_runs)

    def calls(prefix: str):
        out = []
        for i, (kind, seed) in enumerate(
            [("settle", 7), ("settle_over", None), ("fail", 3), ("settle", None), ("fail", None)]
        ):
            rid = f"{prefix}{i}"
            meta = replace(make_meta(rid, account_id=f"{prefix}acct"), seed=seed)
            common = {"account_id": f"{prefix}acct", "reserved": 10_000}
            if kind == "settle":
                result = make_result(rid, charge=4_000, **common)
            elif kind == "settle_over":
                result = make_result(rid, charge=15_000, **common)
            else:
                result = make_result(rid, outcome=Outcome.UNSETTLED, **common)
            out.append((meta, result))
        return out

    a, b = f"fa{run}-", f"fb{run}-"
    for meta, result in calls(a):
        hold(session, meta, now=T0)
        effect = apply_result(session, result, now=T0, grace=GRACE)
        record_findings(session, result, effect, salt=salt, now=T0, meta=meta, opened=True)
    batch = calls(b)
    with session.begin_nested():
        applied = apply_common(
            session, [m for m, _ in batch], [r for _, r in batch], now=T0,
            columns=columns_of(batch, salt),
        )  # fmt: skip
        decided = []
        for _, result in batch:
            effect, found = "settled", applied.settled.get(result.request_id)
            if found is None:
                effect, found = "unsettled", applied.unsettled[result.request_id]
            decided.append((found, result, True, effect))
        record_findings_many(session, decided, now=T0)
    assert len(decided) == 5
    assert _findings_digest(session, a) == _findings_digest(session, b)
    # The digest is not vacuous: fingerprints, output hashes, anomalies and events are there.
    digest = _findings_digest(session, b)
    assert any(row[0] == "e" for row in digest) and any(row[0] == "a" for row in digest)
    assert any(row[0] == "r" and row[2] != "None" and row[3] != "None" for row in digest)
