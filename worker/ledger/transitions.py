"""The money rules' state machine, as one pure function: what a reconciled result does to a
reservation in a given state.

Contract of ``decide``: given the result and the reservation's status (with its failure's detection
and resolution times, when it has one), the one ``Decision`` both write paths execute. ``held`` →
``settled`` | ``voided`` | ``unsettled``; an ``unsettled`` reservation settles late within ``grace``
of its failure; the same effect again is a ``duplicate``, anything else on a closed reservation is
``final``. It raises ``LedgerError`` for a result that contradicts itself (unsettled without a
reason, a negative charge, an unknown outcome) or a ledger that does (unsettled without a failure).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from models import Status
from worker.errors import LedgerError
from worker.ledger.effects import Effect
from worker.result import Outcome, Reason, Result


class Decision(NamedTuple):
    effect: Effect
    reason: Reason | None = None  # the failure's reason, for ``unsettled``
    # A late, complete result of an unpriced model: the open failure's reason becomes ``unpriced``
    # (late data completed the call; what now blocks it is the missing price).
    relabel_unpriced: bool = False


DUPLICATE = Decision(Effect.DUPLICATE)
FINAL = Decision(Effect.FINAL)


def unsettled(status: str, reason: Reason) -> Decision:
    """Keep the hold and record the failure: only a ``held`` reservation."""
    if status == Status.UNSETTLED:
        return DUPLICATE
    if status != Status.HELD:
        return FINAL
    return Decision(Effect.UNSETTLED, reason)


def void(status: str) -> Decision:
    """Release the whole hold: only a ``held`` reservation."""
    if status == Status.VOIDED:
        return DUPLICATE
    if status != Status.HELD:
        return FINAL
    return Decision(Effect.VOIDED)


def settled(
    result: Result,
    status: str,
    *,
    detected_at: datetime | None,
    resolved_at: datetime | None,
    now: datetime,
    grace: timedelta,
) -> Decision:
    """Charge a settled result: a ``held`` reservation, or an ``unsettled`` one whose failure is
    unresolved and was detected at most ``grace`` ago (late). An unpriced result (no charge) is
    marked unsettled with reason ``unpriced`` instead."""
    if result.charge_micros is None:
        if status == Status.UNSETTLED and resolved_at is None:
            return Decision(Effect.DUPLICATE, relabel_unpriced=True)
        return unsettled(status, Reason.UNPRICED)
    if int(result.charge_micros) < 0:
        raise LedgerError(f"{result.request_id}: negative charge {int(result.charge_micros)}")
    if status == Status.SETTLED:
        return DUPLICATE
    if status == Status.UNSETTLED:
        if detected_at is None:
            raise LedgerError(f"{result.request_id}: unsettled without a recorded failure")
        if resolved_at is not None or now > detected_at + grace:
            return FINAL
        return Decision(Effect.SETTLED_LATE)
    if status != Status.HELD:
        return FINAL
    return Decision(Effect.SETTLED)


def decide(
    result: Result,
    status: str,
    *,
    detected_at: datetime | None,
    resolved_at: datetime | None,
    now: datetime,
    grace: timedelta,
) -> Decision:
    """What ``result`` does to a reservation in ``status`` (see the module docstring)."""
    if result.outcome is Outcome.SETTLED:
        return settled(
            result, status, detected_at=detected_at, resolved_at=resolved_at, now=now, grace=grace
        )
    if result.outcome is Outcome.VOID:
        return void(status)
    if result.outcome is Outcome.UNSETTLED:
        if result.reason is None:
            raise LedgerError(f"{result.request_id}: unsettled result without a reason")
        return unsettled(status, Reason(result.reason))
    raise LedgerError(f"{result.request_id}: unknown outcome {result.outcome!r}")
