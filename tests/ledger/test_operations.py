from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ledger.factories import T0, make_meta, settled, unsettled, voided
from models import Failure, Reservation, Transaction, UsageRecord
from worker.core.errors import LedgerError
from worker.core.money import Micros
from worker.core.result import Reason
from worker.ledger.balances import Balance, balance, ledger_is_balanced, open_holds
from worker.ledger.operations import (
    HoldOutcome,
    apply_result,
    hold,
    mark_unsettled,
    resolve,
    resolve_expired,
    settle,
    void,
)

GRACE = timedelta(hours=1)
NOW = T0 + timedelta(seconds=30)


def status(session: Session, request_id: str) -> str:
    return session.execute(
        select(Reservation.status).where(Reservation.request_id == request_id)
    ).scalar_one()


def kinds(session: Session, request_id: str) -> list[tuple[str, bool]]:
    return [
        (kind, flagged)
        for kind, flagged in session.execute(
            select(Transaction.kind, Transaction.flagged)
            .join(Reservation, Reservation.id == Transaction.reservation_id)
            .where(Reservation.request_id == request_id)
            .order_by(Transaction.id)
        ).all()
    ]


def failure(session: Session, request_id: str) -> Failure:
    return session.execute(
        select(Failure)
        .join(Reservation, Reservation.id == Failure.reservation_id)
        .where(Reservation.request_id == request_id)
    ).scalar_one()


def test_hold_moves_available_to_held_and_is_idempotent(session: Session) -> None:
    assert hold(session, make_meta(reserved=10_000), now=NOW) is HoldOutcome.HELD
    assert hold(session, make_meta(reserved=10_000), now=NOW) is HoldOutcome.DUPLICATE
    assert balance(session, "acct-1") == Balance(Micros(-10_000), Micros(10_000), Micros(0))
    assert kinds(session, "req-1") == [("hold", False)]
    with pytest.raises(LedgerError, match="already held"):
        hold(session, make_meta(reserved=10_001), now=NOW)
    with pytest.raises(LedgerError):
        hold(session, make_meta(reserved=10_000, account_id="other"), now=NOW)
    assert ledger_is_balanced(session)


def test_zero_hold_records_the_reservation_without_entries(session: Session) -> None:
    assert hold(session, make_meta(reserved=0), now=NOW) is HoldOutcome.RECORDED
    assert status(session, "req-1") == "held"
    assert kinds(session, "req-1") == []
    assert apply_result(session, settled(reserved=0, charge=0), now=NOW, grace=GRACE) == "settled"
    assert kinds(session, "req-1") == []
    assert ledger_is_balanced(session)


def test_hold_refuses_floats(session: Session) -> None:
    meta = make_meta()
    object.__setattr__(meta, "reserved_micros", 1.5)
    with pytest.raises(TypeError):
        hold(session, meta, now=NOW)


def test_settle_charges_and_releases_the_rest_once(session: Session) -> None:
    hold(session, make_meta(reserved=10_000), now=NOW)
    assert apply_result(session, settled(charge=4_000), now=NOW, grace=GRACE) == "settled"
    expected = Balance(Micros(-4_000), Micros(0), Micros(4_000))
    assert balance(session, "acct-1") == expected
    assert apply_result(session, settled(charge=4_000), now=NOW, grace=GRACE) == "duplicate"
    assert settle(session, settled(charge=4_000), now=NOW, grace=GRACE) == "duplicate"
    assert balance(session, "acct-1") == expected
    assert kinds(session, "req-1") == [("hold", False), ("charge", False)]
    record = session.execute(
        select(UsageRecord)
        .join(Reservation, Reservation.id == UsageRecord.reservation_id)
        .where(Reservation.request_id == "req-1")
    ).scalar_one()
    assert (record.prompt_tokens, record.cached_tokens, record.completion_tokens) == (100, 20, 50)
    assert record.usage_source == "reported"
    assert record.charge_micros == 4_000
    assert (record.estimate_prompt_tokens, record.estimate_completion_tokens) == (98, 52)
    assert record.finish_reasons == "stop"
    assert record.completion_id == "chatcmpl-1"
    assert status(session, "req-1") == "settled"
    assert ledger_is_balanced(session)


def test_charge_above_hold_posts_a_flagged_true_up(session: Session) -> None:
    hold(session, make_meta(reserved=1_000), now=NOW)
    assert apply_result(session, settled(reserved=1_000, charge=1_500), now=NOW, grace=GRACE) == (
        "settled"
    )
    assert balance(session, "acct-1") == Balance(Micros(-1_500), Micros(0), Micros(1_500))
    assert kinds(session, "req-1") == [("hold", False), ("charge", False), ("true_up", True)]
    assert ledger_is_balanced(session)


def test_void_releases_the_whole_hold(session: Session) -> None:
    hold(session, make_meta(reserved=7_000), now=NOW)
    assert void(session, voided(reserved=7_000), now=NOW) == "voided"
    assert apply_result(session, voided(reserved=7_000), now=NOW, grace=GRACE) == "duplicate"
    assert apply_result(session, settled(reserved=7_000), now=NOW, grace=GRACE) == "final"
    assert balance(session, "acct-1") == Balance(Micros(0), Micros(0), Micros(0))
    assert status(session, "req-1") == "voided"


def test_settle_before_hold_records_the_hold_first(session: Session) -> None:
    assert apply_result(session, settled(charge=2_500), now=NOW, grace=GRACE) == "settled"
    assert kinds(session, "req-1") == [("hold", False), ("charge", False)]
    assert hold(session, make_meta(reserved=10_000), now=NOW) is HoldOutcome.DUPLICATE
    assert balance(session, "acct-1") == Balance(Micros(-2_500), Micros(0), Micros(2_500))


def test_result_contradicting_the_hold_is_refused(session: Session) -> None:
    hold(session, make_meta(reserved=10_000), now=NOW)
    with pytest.raises(LedgerError):
        apply_result(session, settled(reserved=9_999), now=NOW, grace=GRACE)


def test_unsettled_keeps_the_hold_and_records_the_failure(session: Session) -> None:
    hold(session, make_meta(reserved=10_000), now=NOW)
    assert apply_result(session, unsettled(exposure=3_000), now=NOW, grace=GRACE) == "unsettled"
    assert apply_result(session, unsettled(exposure=3_000), now=NOW, grace=GRACE) == "duplicate"
    assert balance(session, "acct-1") == Balance(Micros(-10_000), Micros(10_000), Micros(0))
    assert open_holds(session, "acct-1") == 10_000
    row = failure(session, "req-1")
    assert (row.reason, row.exposure_micros, row.resolved_at) == ("error_finish", 3_000, None)
    assert (row.estimate_prompt_tokens, row.estimate_completion_tokens) == (98, 52)
    assert row.finish_reasons == "error"


def test_mark_unsettled_directly(session: Session) -> None:
    result = unsettled(reason=Reason.INCOMPLETE)
    assert mark_unsettled(session, result, now=NOW) == "unsettled"
    assert failure(session, "req-1").reason == "incomplete"


def test_late_settle_within_grace_settles_and_closes_the_failure(session: Session) -> None:
    hold(session, make_meta(), now=NOW)
    apply_result(session, unsettled(), now=NOW, grace=GRACE)
    late = NOW + GRACE
    assert apply_result(session, settled(charge=4_000), now=late, grace=GRACE) == "settled_late"
    assert status(session, "req-1") == "settled"
    row = failure(session, "req-1")
    assert (row.action, row.resolved_by, row.resolved_at) == ("settled_late", "worker", late)
    assert balance(session, "acct-1").charged == 4_000
    with pytest.raises(LedgerError, match="already resolved"):
        resolve(session, "req-1", "release", who="ops", note="n", now=late)


def test_late_settle_after_grace_before_resolution_settles_from_the_hold(session: Session) -> None:
    """Past grace but not resolved yet (the policy has not run, or is ``none``): the hold is still
    there, so the late result settles from it as within grace (was: ``final``, the data dropped)."""
    hold(session, make_meta(), now=NOW)
    apply_result(session, unsettled(), now=NOW, grace=GRACE)
    too_late = NOW + GRACE + timedelta(microseconds=1)
    assert apply_result(session, settled(charge=4_000), now=too_late, grace=GRACE) == "settled_late"
    assert status(session, "req-1") == "settled"
    assert balance(session, "acct-1") == Balance(Micros(-4_000), Micros(0), Micros(4_000))


@pytest.mark.parametrize(
    ("action", "exposure", "charge", "delta"),
    [
        ("release", 3_000, 4_000, 4_000),  # the hold was released: the whole charge, late
        ("charge_estimate", 3_000, 4_000, 1_000),  # the estimate was charged: the rest of it
        ("charge_estimate", 3_000, 1_000, -2_000),  # the estimate was too high: refunded
        ("charge_estimate", 12_500, 12_500, 0),  # exactly the estimate: nothing moves
    ],
)
def test_a_result_after_resolution_is_charged_late(
    session: Session, action: str, exposure: int, charge: int, delta: int
) -> None:
    """Issue 35, leak 8: a spool replayed after the grace brings a complete call whose hold was
    already resolved. It is charged, in its own flagged ``charge`` transaction, for the charge
    less what the resolution charged; the call ends settled with its usage record, its failure
    keeps its resolution, and the same result again changes nothing."""
    hold(session, make_meta(), now=NOW)
    apply_result(session, unsettled(exposure=exposure), now=NOW, grace=GRACE)
    later = NOW + GRACE * 3
    resolve(session, "req-1", action, who="policy", note="grace", now=NOW + GRACE * 2)
    result = settled(charge=charge)
    assert apply_result(session, result, now=later, grace=GRACE, closed=True) == "charged_late"
    assert status(session, "req-1") == "settled"
    assert balance(session, "acct-1") == Balance(Micros(-charge), Micros(0), Micros(charge))
    assert ledger_is_balanced(session)
    late = [flagged for kind, flagged in kinds(session, "req-1") if kind == "charge"]
    assert late == ([True] if delta else [])  # a zero difference posts nothing
    assert failure(session, "req-1").action == action
    usage = session.scalars(
        select(UsageRecord.charge_micros)
        .join(Reservation, Reservation.id == UsageRecord.reservation_id)
        .where(Reservation.request_id == "req-1")
    ).all()
    assert usage == [charge]
    assert apply_result(session, result, now=later, grace=GRACE, closed=True) == "duplicate"
    assert balance(session, "acct-1").charged == charge


def test_resolve_release_exactly_once(session: Session) -> None:
    hold(session, make_meta(), now=NOW)
    apply_result(session, unsettled(), now=NOW, grace=GRACE)
    assert resolve(session, "req-1", "release", who="ana", note="upstream", now=NOW) == "released"
    assert balance(session, "acct-1") == Balance(Micros(0), Micros(0), Micros(0))
    row = failure(session, "req-1")
    assert (row.action, row.resolved_by, row.note) == ("release", "ana", "upstream")
    with pytest.raises(LedgerError, match="already resolved"):
        resolve(session, "req-1", "release", who="ana", note="again", now=NOW)
    with pytest.raises(LedgerError):
        resolve(session, "req-1", "charge_estimate", who="ana", note="again", now=NOW)
    assert kinds(session, "req-1") == [("hold", False), ("resolve_release", False)]


def test_resolve_charge_estimate_caps_by_the_hold_with_a_true_up(session: Session) -> None:
    hold(session, make_meta("a", reserved=10_000), now=NOW)
    hold(session, make_meta("b", reserved=1_000), now=NOW)
    apply_result(session, unsettled("a", exposure=3_000), now=NOW, grace=GRACE)
    apply_result(session, unsettled("b", reserved=1_000, exposure=1_200), now=NOW, grace=GRACE)
    assert resolve(session, "a", "charge_estimate", who="x", note="", now=NOW) == (
        "settled_from_estimate"
    )
    resolve(session, "b", "charge_estimate", who="x", note="", now=NOW)
    assert balance(session, "acct-1") == Balance(Micros(-4_200), Micros(0), Micros(4_200))
    assert kinds(session, "b") == [("hold", False), ("resolve_charge", False), ("true_up", True)]
    assert ledger_is_balanced(session)


def test_resolve_refusals(session: Session) -> None:
    with pytest.raises(LedgerError, match="no such request"):
        resolve(session, "nope", "release", who="x", note="", now=NOW)
    hold(session, make_meta(), now=NOW)
    with pytest.raises(LedgerError, match="not unsettled"):
        resolve(session, "req-1", "release", who="x", note="", now=NOW)
    with pytest.raises(LedgerError, match="unknown resolution"):
        resolve(session, "req-1", "settled_late", who="x", note="", now=NOW)


def test_unpriced_settled_result_is_unsettled_and_cannot_charge_the_estimate(
    session: Session,
) -> None:
    hold(session, make_meta(), now=NOW)
    assert apply_result(session, settled(charge=None), now=NOW, grace=GRACE) == "unsettled"
    row = failure(session, "req-1")
    assert (row.reason, row.exposure_micros) == ("unpriced", None)
    with pytest.raises(LedgerError, match="unpriced"):
        resolve(session, "req-1", "charge_estimate", who="x", note="", now=NOW)
    assert resolve(session, "req-1", "release", who="x", note="", now=NOW) == "released"


def test_resolve_expired_by_policy(session: Session) -> None:
    for rid in ("old-1", "old-2", "new"):
        hold(session, make_meta(rid), now=NOW)
    apply_result(session, unsettled("old-1", exposure=3_000), now=NOW, grace=GRACE)
    apply_result(session, settled("old-2", charge=None), now=NOW, grace=GRACE)
    later = NOW + timedelta(minutes=30)
    apply_result(session, unsettled("new"), now=later, grace=GRACE)
    expiry = NOW + GRACE + timedelta(seconds=1)
    assert resolve_expired(session, now=expiry, grace=GRACE, policy="none") == 0
    n = resolve_expired(session, now=expiry, grace=GRACE, policy="charge_estimate")
    assert n == 2
    assert status(session, "old-1") == "settled_from_estimate"
    assert status(session, "old-2") == "released"  # unpriced: nothing to charge
    assert status(session, "new") == "unsettled"
    assert failure(session, "old-2").resolved_by == "policy"
    assert resolve_expired(session, now=expiry, grace=GRACE) == 0
    assert resolve_expired(session, now=later + GRACE * 2, grace=GRACE) == 1
    row = failure(session, "new")
    assert (row.action, row.exposure_micros) == ("release", 3_000)  # kept as unbilled exposure
    assert balance(session, "acct-1") == Balance(Micros(-3_000), Micros(0), Micros(3_000))


def test_naive_now_is_refused(session: Session) -> None:
    with pytest.raises(LedgerError, match="naive"):
        hold(session, make_meta(), now=NOW.replace(tzinfo=None))


def test_one_transaction_per_kind_per_reservation(session: Session) -> None:
    hold(session, make_meta(), now=NOW)
    apply_result(session, settled(), now=NOW, grace=GRACE)
    # (Funding transactions belong to no reservation: the rule is about reservations.)
    counts = session.execute(
        select(Transaction.kind, func.count())
        .where(Transaction.reservation_id.is_not(None))
        .group_by(Transaction.reservation_id, Transaction.kind)
    ).all()
    assert all(count == 1 for _, count in counts)


def test_charge_delivered_charges_usage_the_provider_reported_before_an_error(
    session: Session,
) -> None:
    """An error finish whose provider reported usage (the reconciler exposes it at that usage's
    price, marked ``usage_before_error``) is charged that exposure at the grace's end, never 0;
    one without usage is released, its exposure kept as unbilled exposure."""
    cases = {"reported": (("usage_before_error",), 3_100), "estimated": ((), 2_900)}
    for rid, (anomalies, exposure) in cases.items():
        hold(session, make_meta(rid), now=NOW)
        result = unsettled(rid, reason=Reason.ERROR_FINISH, exposure=exposure, anomalies=anomalies)
        apply_result(session, result, now=NOW, grace=GRACE)
    assert failure(session, "reported").exposure_reported is True
    assert failure(session, "estimated").exposure_reported is False
    expiry = NOW + GRACE + timedelta(seconds=1)
    assert resolve_expired(session, now=expiry, grace=GRACE, policy="charge_delivered") == 2
    assert status(session, "reported") == "settled_from_estimate"
    assert status(session, "estimated") == "released"
    assert failure(session, "estimated").exposure_micros == 2_900
    # Charged exactly the reported usage's price, nothing held.
    assert balance(session, "acct-1") == Balance(Micros(-3_100), Micros(0), Micros(3_100))
    assert ledger_is_balanced(session)


def test_charge_delivered_charges_served_answers_and_releases_the_rest(session: Session) -> None:
    """The default policy: a call whose answer was served without usage (``incomplete``: the
    client hung up mid-answer; ``missing_usage``) is charged its estimate after grace; an error
    finish is released; an unpriced delivered call is released (no price to charge)."""
    from worker.config import RESOLVE_POLICIES, Settings

    assert Settings.from_env({}).resolve_policy == RESOLVE_POLICIES[0] == "charge_delivered"
    cases = {
        "hung-up": (Reason.INCOMPLETE, 4_000),
        "no-usage": (Reason.MISSING_USAGE, 2_500),
        "errored": (Reason.ERROR_FINISH, 3_000),
        "unpriced": (Reason.INCOMPLETE, None),
    }
    for rid, (reason, exposure) in cases.items():
        hold(session, make_meta(rid), now=NOW)
        apply_result(
            session, unsettled(rid, reason=reason, exposure=exposure), now=NOW, grace=GRACE
        )
    expiry = NOW + GRACE + timedelta(seconds=1)
    assert resolve_expired(session, now=expiry, grace=GRACE, policy="charge_delivered") == 4
    assert status(session, "hung-up") == status(session, "no-usage") == "settled_from_estimate"
    assert status(session, "errored") == status(session, "unpriced") == "released"
    assert failure(session, "errored").action == "release"
    # Charged exactly the two delivered calls' estimates, nothing else, nothing held.
    assert balance(session, "acct-1") == Balance(Micros(-6_500), Micros(0), Micros(6_500))
