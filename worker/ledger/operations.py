"""Moving money: hold, settle, void, mark unsettled, resolve; two-phase transfers over the ledger.

Contract. Every function takes a ``Session`` and never commits: the caller owns the transaction (one
unit of work, one commit, and only then acknowledge the message). Each call writes a few Core
statements; none of them goes through the ORM unit of work.

A hold moves the reserved amount from the customer's ``available`` to ``held``; the outcome of the call
then moves ``held`` on: to ``revenue`` (the charge) and back to ``available`` (the rest). ``available``
may go negative: the gateway decides credit, the ledger records it. The reservation row is the lock:
every writer of a reservation, its transactions, usage record and failure first takes
``SELECT … FOR UPDATE`` on it (on SQLite the whole database is locked from ``BEGIN IMMEDIATE``), so two
processes settling the same request post one charge; the other sees ``settled`` and returns
``duplicate``. UNIQUE (reservation_id, kind) is the backstop if a path ever forgets the lock.

What may be retried after a rollback is decided in one place, ``worker.db.transient``.

``LedgerError`` is never transient: the input contradicts the ledger (a hold repeated with another
amount, a second resolution, charging an unpriced estimate). A CHECK violation or an unbalanced
transaction is a bug, not a race, and is not transient either.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import Row, bindparam, select, update
from sqlalchemy.orm import Session

from models import Action, Failure, Kind, LedgerKind, Status
from worker.config import DELIVERED_REASONS, RESOLVE_POLICIES
from worker.core.errors import LedgerError, RequestIdReused
from worker.core.money import Micros
from worker.core.request import RequestMeta
from worker.core.result import Outcome, Reason, Result
from worker.ledger import legs, postings, transitions
from worker.ledger.alert_events import correct_unsettled_event
from worker.ledger.effects import Effect
from worker.ledger.rows import aware, failure_values, micros, reservation_values, usage_values

log = logging.getLogger(__name__)

reservations = postings.reservations
failures = postings.failures

WORKER = "worker"
RESOLVE_ACTIONS = (Action.RELEASE, Action.CHARGE_ESTIMATE)


class HoldOutcome(StrEnum):
    HELD = "held"  # reservation recorded and the amount moved to held
    RECORDED = "recorded"  # a reservation of 0 micros: recorded, nothing to hold
    DUPLICATE = "duplicate"  # the same hold again: nothing changed


# --- hold ------------------------------------------------------------------------------------------


RECORDED = select(reservations.c.id, reservations.c.request_digest).where(
    reservations.c.request_id == bindparam("b_request_id")
)
EXISTING_HOLD = select(
    reservations.c.reserved_micros, reservations.c.account_id, reservations.c.request_digest
).where(reservations.c.request_id == bindparam("b_request_id"))


def other_call(recorded: str | None, seen: str | None) -> bool:
    """True when a reservation recorded from the request entry of digest ``recorded`` is met with
    another call's entry (digest ``seen``): the gateway reused the request id. A digest unknown on
    either side (a reservation older than migration 0006, metadata not read from a stream) proves
    nothing, and is taken as the same call."""
    return recorded is not None and seen is not None and recorded != seen


def recorded_from(session: Session, request_id: str) -> Row[Any] | None:
    """(id, request_digest) of the reservation of ``request_id``, or None when there is none."""
    return session.execute(RECORDED, {"b_request_id": request_id}).first()


def hold(session: Session, meta: RequestMeta, *, now: datetime) -> HoldOutcome:
    """Record a request's reservation and hold its amount. Idempotent on ``request_id``.

    The same hold again is a no-op (``DUPLICATE``); another call under the same request id (its
    digest differs: ``other_call``) raises ``RequestIdReused``, the same request with another amount
    or account ``LedgerError``. A reservation of 0 micros is recorded with no hold transaction.
    """
    now = aware(now)
    amount = micros(meta.reserved_micros)
    if amount < 0:
        raise LedgerError(f"{meta.request_id}: reserved_micros must not be negative")
    customer = postings.customer_ids(session, meta.account_id, now)
    reservation_id = postings.insert_reservation(session, reservation_values(meta, now))
    if reservation_id is None:
        existing = session.execute(EXISTING_HOLD, {"b_request_id": meta.request_id}).one()
        if other_call(existing.request_digest, meta.digest):
            raise RequestIdReused(meta.request_id)
        if existing.reserved_micros != amount or existing.account_id != meta.account_id:
            raise LedgerError(
                f"{meta.request_id}: already held {existing.reserved_micros} micros for "
                f"{existing.account_id!r}, refusing {int(amount)} for {meta.account_id!r}"
            )
        return HoldOutcome.DUPLICATE
    if amount == 0:
        return HoldOutcome.RECORDED
    grain = postings.Grain.of(meta.account_id, meta.model, meta.created_at)
    postings.write(session, legs.hold(reservation_id, int(amount), customer, grain), now)
    return HoldOutcome.HELD


def _meta_of(result: Result) -> RequestMeta:
    return RequestMeta(
        request_id=result.request_id,
        account_id=result.account_id,
        model=result.model,
        stream=result.stream,
        include_usage=True,
        reserved_micros=result.reserved_micros,
        created_at=result.created_at,
    )


def _lock_for(session: Session, result: Result, now: datetime) -> postings.Locked:
    """The locked reservation of a result, recording its hold first if it has not arrived yet."""
    row = postings.lock(session, result.request_id)
    if row is None:
        hold(session, _meta_of(result), now=now)
        row = postings.lock(session, result.request_id)
        if row is None:
            raise LedgerError(f"{result.request_id}: the hold just recorded cannot be read back")
    elif row.reserved != result.reserved_micros or row.account_id != result.account_id:
        raise LedgerError(
            f"{result.request_id}: result says {int(result.reserved_micros)} micros for "
            f"{result.account_id!r}, the hold is {row.reserved} for {row.account_id!r}"
        )
    return row


# --- results ---------------------------------------------------------------------------------------


def apply_result(
    session: Session, result: Result, *, now: datetime, grace: timedelta, closed: bool = False
) -> Effect:
    """Apply a reconciled result to its reservation; the one entry point for the pipeline.

    Returns what happened (``transitions.decide``): ``settled``, ``settled_late``, ``voided``,
    ``voided_late``, ``unsettled``, ``reclassified``, ``duplicate`` (this result was applied before) or ``final``
    (the reservation is closed; nothing changed). A result arriving before its hold records the
    hold first, in the same transaction. ``closed``: the result is a close's reading of the stream,
    which may correct the reason of a failure recorded before the close (the sweeper's), or void
    the call; the sweeper's and the recheck's readings never do.
    """
    now = aware(now)
    row = _lock_for(session, result, now)
    recorded = None
    if closed and row.failure_id is not None and result.outcome is Outcome.UNSETTLED:
        recorded = Reason(row.reason)
    decision = transitions.decide(
        result, row.status, detected_at=row.detected_at, resolved_at=row.resolved_at,
        now=now, grace=grace, closed=closed, recorded=recorded,
    )  # fmt: skip
    return execute(session, row, result, decision, now)


def settle(session: Session, result: Result, *, now: datetime, grace: timedelta) -> Effect:
    """Settle a settled result: charge, release the rest, write the usage record. Idempotent.

    An unpriced result (no charge) is marked unsettled with reason ``unpriced`` instead. A result for
    an unsettled reservation settles within ``grace`` of the failure (``settled_late``); after grace
    it changes nothing (``final``).
    """
    if result.outcome is not Outcome.SETTLED:
        raise LedgerError(
            f"{result.request_id}: settle needs a settled result, not {result.outcome}"
        )
    return apply_result(session, result, now=now, grace=grace)


def void(session: Session, result: Result, *, now: datetime) -> Effect:
    """Release the whole hold of a void result (the call never ran or cost nothing)."""
    now = aware(now)
    row = _lock_for(session, result, now)
    return execute(session, row, result, transitions.void(row.status), now)


def mark_unsettled(
    session: Session, result: Result, *, now: datetime, reason: Reason | None = None
) -> Effect:
    """Keep the hold and record the failure (reason, estimate, exposure) for a later resolution."""
    now = aware(now)
    reason = reason or result.reason
    if reason is None:
        raise LedgerError(f"{result.request_id}: unsettled result without a reason")
    row = _lock_for(session, result, now)
    return execute(session, row, result, transitions.unsettled(row.status, Reason(reason)), now)


def execute(
    session: Session,
    row: postings.Locked,
    result: Result,
    decision: transitions.Decision,
    now: datetime,
) -> Effect:
    """Write what ``decision`` says for one locked reservation; returns its effect."""
    effect = decision.effect
    if effect in (Effect.SETTLED, Effect.SETTLED_LATE):
        if result.billed_usage is None or result.charge_micros is None:
            raise LedgerError(f"{result.request_id}: settled result without billed usage")
        revenue = postings.system_account_id(session, LedgerKind.REVENUE)
        charged = legs.charge(
            row.id, row.reserved, int(micros(result.charge_micros)), row.customer, revenue,
            row.grain,
        )  # fmt: skip
        postings.write(session, charged, now)
        usage = usage_values(row.id, result, now)
        session.execute(postings.INSERT_USAGE, usage)
        closed = _resolved(row, Action.SETTLED_LATE) if effect is Effect.SETTLED_LATE else None
        postings.set_status(session, row, Status.SETTLED, now, usage=usage, failure=closed)
        if effect is Effect.SETTLED_LATE:
            postings.close_failure(
                session, row, Action.SETTLED_LATE, who=WORKER, note="a late result settled it",
                now=now,
            )  # fmt: skip
    elif effect is Effect.CHARGED_LATE:
        _charge_late(session, row, result, now)
    elif effect in (Effect.VOIDED, Effect.VOIDED_LATE):
        released = legs.release(row.id, row.reserved, row.customer, row.grain, Kind.RELEASE)
        postings.write(session, released, now)
        closed = _resolved(row, Action.RELEASE) if effect is Effect.VOIDED_LATE else None
        postings.set_status(session, row, Status.VOIDED, now, failure=closed)
        if effect is Effect.VOIDED_LATE:
            postings.close_failure(
                session, row, Action.RELEASE, who=WORKER, note="its close read a void call",
                now=now,
            )  # fmt: skip
    elif effect is Effect.UNSETTLED:
        if decision.reason is None:
            raise LedgerError(f"{result.request_id}: unsettled without a reason")
        failure = failure_values(row.id, result, decision.reason, now)
        session.execute(postings.INSERT_FAILURE, failure)
        postings.set_status(session, row, Status.UNSETTLED, now, failure=failure)
    elif effect is Effect.RECLASSIFIED:
        if decision.reason is None:
            raise LedgerError(f"{result.request_id}: reclassified without a reason")
        _reclassify(session, row, result, decision.reason, now)
    elif decision.relabel_unpriced:
        session.execute(
            update(Failure)
            .where(Failure.reservation_id == row.id, Failure.reason != str(Reason.UNPRICED))
            .values(reason=str(Reason.UNPRICED), exposure_micros=None)
        )
        if row.failure_id is not None and row.reason != Reason.UNPRICED:  # the UPDATE's rows
            relabelled = {"reason": str(Reason.UNPRICED), "exposure_micros": None,
                          "action": row.action}  # fmt: skip
            postings.move_call(session, row.state, row.state._replace(failure=relabelled))
            correct_unsettled_event(session, row.id, reason=str(Reason.UNPRICED), exposure=None)
    return effect


def _charge_late(session: Session, row: postings.Locked, result: Result, now: datetime) -> None:
    """Settle a call whose failure was resolved before its data came: the charge less what the
    resolution charged (its exposure under ``charge_estimate``, nothing under ``release``) in one
    flagged transaction, and the usage record; the failure keeps its resolution, as history."""
    if result.billed_usage is None or result.charge_micros is None:
        raise LedgerError(f"{result.request_id}: settled result without billed usage")
    already = int(row.exposure or 0) if row.action == Action.CHARGE_ESTIMATE else 0
    revenue = postings.system_account_id(session, LedgerKind.REVENUE)
    amount = int(micros(result.charge_micros))
    postings.write(
        session, legs.late_charge(row.id, amount, already, row.customer, revenue, row.grain), now
    )
    usage = usage_values(row.id, result, now)
    session.execute(postings.INSERT_USAGE, usage)
    postings.set_status(session, row, Status.SETTLED, now, usage=usage)
    log.warning(
        "%s: charged late, after its failure was resolved (%s): %d micros, %d by the resolution",
        result.request_id, row.action, amount, already,
    )  # fmt: skip


def _resolved(row: postings.Locked, action: Action) -> dict[str, Any]:
    """The locked call's failure as ``close_failure`` leaves it (for ``calls_daily``)."""
    return {"reason": row.reason, "exposure_micros": row.exposure, "action": str(action)}


def _reclassify(
    session: Session, row: postings.Locked, result: Result, reason: Reason, now: datetime
) -> None:
    """The open failure takes the close's reading (reason, estimate, exposure, finish reasons)
    and so does its alert event; ``detected_at`` stays, so grace still counts from the first
    detection. No money moves: the hold stays, and the ledger's entries are untouched; the call
    moves to its new reason's row in ``calls_daily``."""
    values = failure_values(row.id, result, reason, now)
    del values["reservation_id"], values["detected_at"]
    corrected = session.execute(
        update(failures)
        .where(failures.c.id == row.failure_id, failures.c.resolved_at.is_(None))
        .values(**values)
    ).rowcount
    if corrected != 1:
        raise LedgerError(f"{result.request_id}: failure {row.failure_id} is already resolved")
    correct_unsettled_event(
        session, row.id, reason=values["reason"], exposure=values["exposure_micros"]
    )
    corrected_failure = {"reason": values["reason"], "exposure_micros": values["exposure_micros"],
                         "action": row.action}  # fmt: skip
    postings.move_call(session, row.state, row.state._replace(failure=corrected_failure))
    log.info("%s: its close read %s; the failure takes that reason", result.request_id, reason)


# --- resolution ------------------------------------------------------------------------------------


def resolve(
    session: Session,
    request_id: str,
    action: str,
    *,
    who: str,
    note: str,
    now: datetime,
    repeat_ok: bool = False,
) -> str:
    """Resolve an unsettled failure exactly once: ``release`` the hold or ``charge_estimate``.

    ``charge_estimate`` charges the failure's exposure (the estimate's price; above the hold, the
    excess is a flagged true-up) and releases the rest. A second resolution, an unknown request, a
    request with no failure, or charging the estimate of an unpriced model raise ``LedgerError``;
    with ``repeat_ok``, a second resolution by the same action (the same command run again) moves
    nothing and returns ``already <status>`` instead, as a repeated credit does.
    Returns the new status: ``released`` or ``settled_from_estimate``.
    """
    now = aware(now)
    if action not in RESOLVE_ACTIONS:
        raise LedgerError(f"unknown resolution {action!r}: use release or charge_estimate")
    if not who:
        raise LedgerError("a resolution needs a name (who resolved it)")
    row = postings.lock(session, request_id)
    if row is None:
        raise LedgerError(f"{request_id}: no such request")
    if row.failure_id is None:
        raise LedgerError(f"{request_id}: not unsettled (status {row.status})")
    if row.resolved_at is not None:
        if repeat_ok and row.action == action:
            return f"already {row.status}"
        raise LedgerError(f"{request_id}: already resolved ({row.action})")
    if action == Action.RELEASE:
        moved = legs.release(row.id, row.reserved, row.customer, row.grain, Kind.RESOLVE_RELEASE)
        status = Status.RELEASED
    else:
        if row.exposure is None:
            raise LedgerError(f"{request_id}: the model is unpriced, its estimate has no price")
        revenue = postings.system_account_id(session, LedgerKind.REVENUE)
        moved = legs.charge(
            row.id, row.reserved, int(Micros(row.exposure)), row.customer, revenue, row.grain,
            Kind.RESOLVE_CHARGE,
        )  # fmt: skip
        status = Status.SETTLED_FROM_ESTIMATE
    postings.write(session, moved, now)
    postings.close_failure(session, row, Action(action), who=who, note=note, now=now)
    postings.set_status(session, row, status, now, failure=_resolved(row, Action(action)))
    return str(status)


def resolve_expired(
    session: Session,
    *,
    now: datetime,
    grace: timedelta,
    policy: str = "release",
    who: str = "policy",
    limit: int | None = None,
) -> int:
    """Resolve the failures detected more than ``grace`` ago by ``policy``; returns how many.

    ``release`` keeps the estimate's price on the failure row as unbilled exposure; under
    ``charge_estimate`` an unpriced failure is released (there is no price to charge);
    ``charge_delivered`` charges the estimate of the failures whose answer was served
    (``DELIVERED_REASONS``) and the exposure of an ``error_finish`` whose provider reported usage
    (``exposure_reported``: the exposure is that usage's price, which the provider bills),
    and releases the others; ``none`` leaves everything for a person.
    Rows locked by another process are skipped, not waited for.
    """
    now = aware(now)
    if policy not in RESOLVE_POLICIES:
        raise LedgerError(f"unknown resolve policy {policy!r}")
    if policy == "none":
        return 0
    query = (
        select(
            reservations.c.request_id,
            failures.c.exposure_micros,
            failures.c.reason,
            failures.c.exposure_reported,
        )
        .select_from(failures.join(reservations, reservations.c.id == failures.c.reservation_id))
        .where(
            failures.c.resolved_at.is_(None),
            failures.c.detected_at < now - grace,
            reservations.c.status == str(Status.UNSETTLED),
        )
        .order_by(failures.c.detected_at)
        .with_for_update(of=reservations, skip_locked=True)
    )
    if limit is not None:
        query = query.limit(limit)
    resolved = 0
    for request_id, exposure, reason, reported in session.execute(query).all():
        action = policy
        note = f"grace of {int(grace.total_seconds())}s expired; policy {policy}"
        if policy == "charge_delivered":
            delivered = reason in DELIVERED_REASONS or (reason == Reason.ERROR_FINISH and reported)
            action = "charge_estimate" if delivered else "release"
            if action == "release":
                note += f" ({reason}: released)"
            elif reason == Reason.ERROR_FINISH:
                note += " (error_finish: the provider reported usage)"
        if action == "charge_estimate" and exposure is None:
            action = "release"
            note += " (unpriced: released)"
        try:
            resolve(session, request_id, action, who=who, note=note, now=now)
        except LedgerError as exc:  # resolved meanwhile by someone else: not this batch's problem
            log.warning("resolve_expired skipped %s: %s", request_id, exc)
            continue
        resolved += 1
    return resolved
