"""The money rules' state machine, as one pure function: what a reconciled result does to a
reservation in a given state.

Contract of ``decide``: given the result and the reservation's status (with its failure's detection
and resolution times, when it has one), the one ``Decision`` both write paths execute. ``held`` →
``settled`` | ``voided`` | ``unsettled``; an ``unsettled`` reservation settles late (``settled_late``)
whenever a complete result comes before its failure is resolved, and a ``released`` or
``settled_from_estimate`` one (resolved after grace) is charged late (``charged_late``): a call the
gateway served is charged however late its data comes (a spool replayed after an outage longer
than the grace). Within ``grace`` a close's reading replaces the failure's reason when it reads
another (``reclassified``: see ``unsettled``) or voids it (``voided_late``); the same effect again is a ``duplicate``, anything
else on a closed reservation is ``final``. It raises ``LedgerError`` for a result that contradicts
itself (unsettled without a reason, a negative charge, an unknown outcome) or a ledger that does
(unsettled without a failure).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from models import Status
from worker.core.errors import LedgerError
from worker.core.result import Outcome, Reason, Result
from worker.ledger.effects import Effect


class Decision(NamedTuple):
    effect: Effect
    reason: Reason | None = None  # the failure's reason, for ``unsettled``
    # A late, complete result of an unpriced model: the open failure's reason becomes ``unpriced``
    # (late data completed the call; what now blocks it is the missing price).
    relabel_unpriced: bool = False


DUPLICATE = Decision(Effect.DUPLICATE)
FINAL = Decision(Effect.FINAL)


def unsettled(status: str, reason: Reason, *, correctable: Reason | None = None) -> Decision:
    """Keep the hold and record the failure: only a ``held`` reservation.

    An ``unsettled`` reservation whose open failure may still be corrected (``correctable``: its
    recorded reason, given only for a close's reading within grace of an unresolved failure) takes
    this reason instead when it is another one (``reclassified``). A close is the gateway's word
    that the call ended and how; a failure recorded before it (the sweeper's, from a stream that
    had gone quiet) is provisional. Streams only grow, so a later close reads at least as much as
    any earlier reading: the same close again, in any order, reads the same reason (``duplicate``).
    """
    if status == Status.UNSETTLED:
        if correctable is not None and correctable != reason:
            return Decision(Effect.RECLASSIFIED, reason)
        return DUPLICATE
    if status != Status.HELD:
        return FINAL
    return Decision(Effect.UNSETTLED, reason)


def void(status: str, *, late: bool = False) -> Decision:
    """Release the whole hold: a ``held`` reservation, or an ``unsettled`` one when ``late`` (a
    close's reading within grace of an unresolved failure, which is provisional as in
    ``unsettled``): ``voided_late``, the failure closed as released."""
    if status == Status.VOIDED:
        return DUPLICATE
    if late and status == Status.UNSETTLED:
        return Decision(Effect.VOIDED_LATE)
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
    """Charge a settled result: a ``held`` reservation; an ``unsettled`` one whose failure is
    unresolved, within grace or after it (``settled_late``: the hold is still there); a resolved
    one (``charged_late``: the hold is gone, the charge is taken from the available balance, less
    what the resolution charged). An unpriced result (no charge) is marked unsettled with reason
    ``unpriced`` instead. ``now`` and ``grace`` no longer limit a settlement: late data of a served
    call is charged, never dropped."""
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
        if resolved_at is not None:
            return FINAL
        return Decision(Effect.SETTLED_LATE)
    if status in (Status.RELEASED, Status.SETTLED_FROM_ESTIMATE):
        return Decision(Effect.CHARGED_LATE)
    if status != Status.HELD:
        return FINAL
    return Decision(Effect.SETTLED)


def _open_within(
    detected_at: datetime | None, resolved_at: datetime | None, now: datetime, grace: timedelta
) -> bool:
    """A failure late data may still change: unresolved, detected at most ``grace`` ago."""
    return detected_at is not None and resolved_at is None and now <= detected_at + grace


def decide(
    result: Result,
    status: str,
    *,
    detected_at: datetime | None,
    resolved_at: datetime | None,
    now: datetime,
    grace: timedelta,
    closed: bool = False,
    recorded: Reason | None = None,
) -> Decision:
    """What ``result`` does to a reservation in ``status`` (see the module docstring).

    ``closed``: the result is a close's reading of the stream (not the sweeper's or a recheck's);
    ``recorded``: the reason of the reservation's failure, when it has one (needed only for a
    close's unsettled result on an ``unsettled`` reservation)."""
    if result.outcome is Outcome.SETTLED:
        return settled(
            result, status, detected_at=detected_at, resolved_at=resolved_at, now=now, grace=grace
        )
    # A close's reading may still change an unsettled call (see ``unsettled``).
    late = (
        closed and status == Status.UNSETTLED and _open_within(detected_at, resolved_at, now, grace)
    )
    if result.outcome is Outcome.VOID:
        return void(status, late=late)
    if result.outcome is Outcome.UNSETTLED:
        if result.reason is None:
            raise LedgerError(f"{result.request_id}: unsettled result without a reason")
        correctable = None
        if late:
            if recorded is None:
                raise LedgerError(f"{result.request_id}: unsettled without a recorded failure")
            correctable = recorded
        return unsettled(status, Reason(result.reason), correctable=correctable)
    raise LedgerError(f"{result.request_id}: unknown outcome {result.outcome!r}")
