"""``transitions.decide`` for an unsettled reservation met by another reading (pure): only a close's
reading, within grace of an unresolved failure, replaces the recorded reason or voids the call."""

from __future__ import annotations

from datetime import timedelta

import pytest

from models import Status
from worker.core.errors import LedgerError
from worker.core.result import Reason
from worker.ledger.effects import Effect
from worker.ledger.transitions import decide

from .factories import T0, unsettled, voided

GRACE = timedelta(hours=1)
MISSING = unsettled(reason=Reason.MISSING_USAGE, finish_reason="stop")


def decided(
    *,
    closed: bool,
    recorded: Reason | None = Reason.INCOMPLETE,
    after: timedelta = timedelta(seconds=5),
    resolved: bool = False,
    status: str = Status.UNSETTLED,
):
    return decide(
        MISSING,
        status,
        detected_at=T0,
        resolved_at=T0 + after if resolved else None,
        now=T0 + after,
        grace=GRACE,
        closed=closed,
        recorded=recorded,
    )


def test_a_close_reading_another_reason_reclassifies_the_failure() -> None:
    decision = decided(closed=True)
    assert (decision.effect, decision.reason) == (Effect.RECLASSIFIED, Reason.MISSING_USAGE)


def test_the_same_reason_again_is_a_duplicate() -> None:
    assert decided(closed=True, recorded=Reason.MISSING_USAGE).effect is Effect.DUPLICATE


@pytest.mark.parametrize(
    "when",
    [
        pytest.param({"closed": False}, id="the sweeper's or a recheck's reading"),
        pytest.param({"closed": True, "after": GRACE + timedelta(seconds=1)}, id="past grace"),
        pytest.param({"closed": True, "resolved": True}, id="resolved"),
    ],
)
def test_nothing_else_replaces_a_recorded_reason(when: dict) -> None:
    assert decided(**when).effect is Effect.DUPLICATE


@pytest.mark.parametrize(
    "status", [Status.SETTLED, Status.RELEASED, Status.VOIDED, Status.SETTLED_FROM_ESTIMATE]
)
def test_a_closed_reservation_stays_final(status: str) -> None:
    assert decided(closed=True, status=status).effect is Effect.FINAL


def test_a_held_reservation_is_marked_unsettled_whoever_read_it() -> None:
    for closed in (True, False):
        decision = decided(closed=closed, recorded=None, status=Status.HELD)
        assert (decision.effect, decision.reason) == (Effect.UNSETTLED, Reason.MISSING_USAGE)


@pytest.mark.parametrize(
    ("closed", "after", "resolved", "effect"),
    [
        (True, timedelta(seconds=5), False, Effect.VOIDED_LATE),
        (False, timedelta(seconds=5), False, Effect.FINAL),
        (True, GRACE + timedelta(seconds=1), False, Effect.FINAL),
        (True, timedelta(seconds=5), True, Effect.FINAL),
    ],
)
def test_only_a_close_within_grace_voids_an_unsettled_call(
    closed: bool, after: timedelta, resolved: bool, effect: Effect
) -> None:
    decision = decide(
        voided(),
        Status.UNSETTLED,
        detected_at=T0,
        resolved_at=T0 + after if resolved else None,
        now=T0 + after,
        grace=GRACE,
        closed=closed,
    )
    assert decision.effect is effect


def test_a_close_on_an_unsettled_reservation_needs_its_recorded_reason() -> None:
    with pytest.raises(LedgerError):
        decided(closed=True, recorded=None)
