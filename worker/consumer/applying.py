"""Step 5 of a batch (``transaction``): apply every call in ONE database transaction.

Contract of ``Applier`` (the step ``transaction``): the batch's fresh holds, plain settlements and failures first, in a
few statements (``ledger.batch``, inside a savepoint: if a bulk statement fails, every call takes
the per-call path instead); then every call still undecided, each inside its own savepoint, so one
bad call neither aborts the batch nor is lost: bad input becomes a dead letter (``dead_reason``), an
unexpected error defers that call (``Effect.DEFERRED``: left pending, claimed and redone later).
A call refused as bad input is still recorded (``_conserve``): unless a reservation already
stands for it, its money facts are salvaged from its request entry and it is held and marked
unsettled ``unreadable`` with its hold as exposure, in the same transaction as its batch: a refusal
is a ledger record, never a disappearance.
A transient database error (``transient.is_transient``: deadlock, serialization failure, lock timeout,
lost connection) rolls the whole transaction back and runs it again, up to ``TRANSACTION_ATTEMPTS``
times with a jittered pause; past the last attempt the calls still failing are deferred. Never
touches Redis; every effect it writes is idempotent, so a batch redone after a crash changes
nothing that was committed.

Inside the transaction its parts are steps too (``worker.consumer.steps``), each given the
``Attempt``: ``ledger_batched`` (the few statements), ``ledger_per_call`` (the savepoint per call),
``conserve`` (refused calls recorded) and ``routes`` (where each call went upstream).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.anomalies import AnomalyKind
from models.reservations import Reservation, Status
from worker.consumer.calls import Batch, CallState, Redo
from worker.consumer.salvage import salvage, summary, unreadable_result
from worker.consumer.steps import Call, Chain, Step, Steps
from worker.consumer.unbilled import record_batch_unbilled
from worker.contract.entries import Entry
from worker.core.errors import InputError, LedgerError, RequestIdReused
from worker.core.result import Outcome, Reason
from worker.db.transient import is_transient
from worker.ledger.alert_events import record_unsettled_event
from worker.ledger.batch import apply_common
from worker.ledger.effects import NO_CHANGE, SETTLED_EFFECTS, Effect
from worker.ledger.findings import (
    columns_of,
    record_anomalies,
    record_findings,
    record_findings_many,
    record_gateway_notes,
    reservation_of,
    withdraw,
)
from worker.ledger.operations import HoldOutcome, apply_result, hold, other_call, recorded_from
from worker.upstream.routes import record_routes

log = logging.getLogger("worker.consumer.consumer")

TRANSACTION_ATTEMPTS = 4
FINAL_STATUSES = frozenset(
    {Status.SETTLED, Status.VOIDED, Status.RELEASED, Status.SETTLED_FROM_ESTIMATE}
)


class _Retry(Exception):
    """Raised inside a batch's transaction to roll all of it back and run it again."""


@dataclass
class Attempt:
    """One attempt at a batch's transaction, as its parts are given it."""

    session: Session
    batch: Batch
    now: datetime
    last: bool  # the last attempt: a transient error defers its call instead of a rerun


class Applier(Step[Batch]):
    name = "transaction"

    def __init__(
        self,
        sessions: Callable[[], Session],
        *,
        hash_salt: str,
        non_streamable: frozenset[str] | tuple[str, ...],
        grace: timedelta,
    ) -> None:
        self.sessions = sessions
        self.hash_salt = hash_salt
        self.non_streamable = non_streamable
        self.grace = grace
        self.parts: Chain[Attempt] = Chain(
            "ledger",
            [
                Call("ledger_batched", self._batched),
                Call("ledger_per_call", self._per_call),
                Call("conserve", self._conserve_refused),
                Call("routes", self._routes),
                Call("unbilled", record_batch_unbilled),
            ],
        )

    def inner(self) -> tuple[Steps, ...]:
        return (self.parts,)

    def process(self, batch: Batch) -> None:
        self.apply(batch)

    def apply(self, batch: Batch) -> None:
        """Run the batch's transaction, again on a transient error (see the module docstring)."""
        before = [call.transaction_state() for call in batch.calls]
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            now = datetime.now(UTC)
            try:
                self._transaction(batch, now, last=attempt == TRANSACTION_ATTEMPTS)
                return
            except _Retry as retry:
                cause = retry.__cause__
            except Exception as exc:
                if not is_transient(exc) or attempt == TRANSACTION_ATTEMPTS:
                    raise
                cause = exc
            log.warning(
                "batch transaction %s/%s rolled back (%s); running it again",
                attempt, TRANSACTION_ATTEMPTS, type(cause).__name__,
            )  # fmt: skip
            batch.stats.retries += 1
            for call, state in zip(batch.calls, before, strict=True):
                call.restore(state)
            time.sleep(random.uniform(0.01, 0.05) * attempt)

    def _transaction(self, batch: Batch, now: datetime, *, last: bool) -> None:
        """One attempt. A transient error on one call raises ``_Retry`` (the whole transaction is
        rolled back) unless this is the ``last`` attempt."""
        with self.sessions() as session, session.begin():
            self.parts.submit(Attempt(session, batch, now, last))

    def _batched(self, attempt: Attempt) -> None:
        self._apply_common(attempt.session, attempt.batch.calls, attempt.now)

    def _per_call(self, attempt: Attempt) -> None:
        """Every call still undecided, each in its own savepoint."""
        session, batch, now, last = attempt.session, attempt.batch, attempt.now, attempt.last
        for call, call_entries in zip(batch.calls, batch.streams, strict=True):
            if call.effect is not None or call.dead_reason is not None:
                continue
            try:
                with session.begin_nested():
                    self._apply_one(session, call, call_entries, now)
            except InputError as exc:
                call.dead_reason = str(exc)
            except LedgerError as exc:
                call.dead_reason = f"ledger refused: {exc}"
            except Exception as exc:
                if is_transient(exc) and not last:
                    raise _Retry from exc
                # A database hiccup or a bug: leave it pending to be claimed and redone; the
                # savepoint kept the rest of the batch. Poison is capped after the commit.
                log.exception("call %s deferred", call.request_id)
                call.defer(exc)

    def _conserve_refused(self, attempt: Attempt) -> None:
        """Every refused call recorded from what can be read of it (``_conserve``)."""
        session, batch, now, last = attempt.session, attempt.batch, attempt.now, attempt.last
        for call, call_entries in zip(batch.calls, batch.streams, strict=True):
            if call.dead_reason is None or call.gave_up or not call_entries:
                continue
            try:
                with session.begin_nested():
                    self._conserve(session, call, call_entries, now)
            except Exception as exc:
                if is_transient(exc) and not last:
                    raise _Retry from exc
                # Left a dead letter only, as before this step existed; said loudly.
                log.exception("refused call %s could not be recorded", call.request_id)

    def _routes(self, attempt: Attempt) -> None:
        session, batch, now = attempt.session, attempt.batch, attempt.now
        # Where each call went upstream (``worker.upstream.routes``), with its hold, and
        # which the gateway billed to its fallback account.
        applied = [
            call.meta
            for call in batch.calls
            if call.meta is not None
            and call.dead_reason is None
            and call.effect not in (None, Effect.DEFERRED)
        ]
        record_routes(session, applied)
        record_gateway_notes(session, applied, now)

    def _apply_common(self, session: Session, calls: list[CallState], now: datetime) -> None:
        """The batch's fresh holds, plain settlements and failures in a few statements."""
        usable = [call for call in calls if call.usable]
        if not usable:
            return
        holds = [call.meta for call in usable if call.meta is not None]
        results = [call.result for call in usable if call.result is not None]
        try:
            with session.begin_nested():
                closing = [(c.meta, c.result) for c in usable if c.meta and c.result]
                columns = columns_of(closing, self.hash_salt)
                applied = apply_common(session, holds, results, now=now, columns=columns)
                decided = []
                for call in usable:
                    if call.result is None:
                        continue
                    effect, found = Effect.SETTLED, applied.settled.get(call.request_id)
                    if found is None:
                        effect, found = Effect.UNSETTLED, applied.unsettled.get(call.request_id)
                    if found is None:
                        continue
                    opened = call.opened or call.request_id not in applied.held
                    decided.append((found, call.result, opened, effect))
                requested = {c.request_id: c.meta.model for c in usable if c.meta is not None}
                record_findings_many(
                    session,
                    decided,
                    now=now,
                    non_streamable=self.non_streamable,
                    requested=requested,
                )
        except Exception:
            log.warning(
                "batched ledger path failed; applying this batch call by call", exc_info=True
            )
            return
        for call in usable:
            call.held_here = call.request_id in applied.held
            if call.request_id in applied.settled and call.result is not None:
                call.effect, call.outcome = Effect.SETTLED, Outcome.SETTLED
                call.charge_micros = int(call.result.charge_micros or 0)
            elif call.request_id in applied.unsettled and call.result is not None:
                call.effect, call.outcome = Effect.UNSETTLED, Outcome.UNSETTLED
                call.reason = str(call.result.reason)
            elif call.held_here and not call.closing:
                call.effect = Effect.HELD

    def _apply_one(
        self, session: Session, call: CallState, entries: list[Entry], now: datetime
    ) -> None:
        recorded = None
        if entries:
            if call.meta is None:
                raise InputError("a call read without its request metadata")
            recorded = recorded_from(session, call.request_id)
            if recorded is not None and other_call(recorded.request_digest, call.meta.digest):
                self._refuse_reused(session, call, recorded.id, now)
                return
        if not call.closing:
            if not entries:
                if _status(session, call.request_id) is not None:
                    withdraw(session, call.request_id, AnomalyKind.NO_OPEN)  # close came first
                    call.effect = Effect.DUPLICATE
                    return
                raise InputError("open for a stream that does not exist")
            if hold(session, call.meta, now=now) is HoldOutcome.DUPLICATE:
                withdraw(session, call.request_id, AnomalyKind.NO_OPEN)
            call.effect = Effect.HELD
            return
        if not entries:
            if _status(session, call.request_id) not in (None, Status.HELD):
                withdraw(session, call.request_id, AnomalyKind.NO_CLOSE)  # swept before its close
                call.effect = Effect.DUPLICATE
                return
            raise InputError("close for a stream that does not exist")
        meta, result = call.meta, call.result
        if meta is None or result is None:
            raise InputError("a close read without its reconciled result")
        if recorded is None:
            # The close came first: hold from the metadata itself, so the reservation records
            # which request entry it came from (``apply_result`` alone would hold without it).
            hold(session, meta, now=now)
            call.held_here = True
        call.outcome = result.outcome
        opened = call.opened
        # A hold recorded by this very close means no open came before it.
        known = opened or call.held_here
        reservation = None if known else reservation_of(session, call.request_id)
        call.effect = apply_result(session, result, now=now, grace=self.grace, closed=True)
        if call.effect in NO_CHANGE or call.effect in (Effect.RECLASSIFIED, Effect.VOIDED_LATE):
            # Its close came: the sweeper's ``no_close`` was a suspicion.
            withdraw(session, call.request_id, AnomalyKind.NO_CLOSE)
        record_findings(
            session,
            result,
            call.effect,
            salt=self.hash_salt,
            now=now,
            non_streamable=self.non_streamable,
            meta=meta,
            reservation=reservation,
            opened=opened or reservation is not None,
        )
        call.reason = None if result.reason is None else str(result.reason)
        if call.effect is Effect.DUPLICATE:
            # The first delivery committed, but its after-commit step (schedule the recheck, or
            # delete the stream) shares a pipeline with its XACK and is lost with it when Redis
            # or the worker goes down in between: redo it, or late usage never settles the call.
            status = _status(session, call.request_id)
            if status == Status.UNSETTLED:
                call.redo = Redo.RECHECK
            elif status in FINAL_STATUSES:
                call.redo = Redo.DELETE
        if call.effect is Effect.UNSETTLED and result.outcome is Outcome.SETTLED:
            # The stream settled but the ledger could not price it: flagged like any failure.
            call.outcome, call.reason = Outcome.UNSETTLED, str(Reason.UNPRICED)
        if call.effect in SETTLED_EFFECTS and result.charge_micros is not None:
            call.charge_micros = int(result.charge_micros)

    def _conserve(
        self, session: Session, call: CallState, entries: list[Entry], now: datetime
    ) -> None:
        """Record a refused call from what can be read of it (``salvage``): held, then unsettled
        ``unreadable`` with its hold as exposure, the anomaly ``unreadable`` saying why, and its
        alert event. A call that already has a reservation keeps it (the sweeper finalizes a held
        one from the reservation alone); a stream without a request entry says no call was made."""
        if recorded_from(session, call.request_id) is not None:
            return
        found = salvage(entries, call.request_id, now)
        if found is None or call.dead_reason is None:
            return
        hold(session, found.meta, now=now)
        result = unreadable_result(found.meta)
        effect = apply_result(session, result, now=now, grace=self.grace)
        reservation = reservation_of(session, call.request_id)
        if reservation is None:
            raise LedgerError(f"{call.request_id}: the hold just recorded cannot be read back")
        detail = summary(call.dead_reason, found.problems)
        record_anomalies(session, reservation[0], {AnomalyKind.UNREADABLE: detail}, now)
        if effect is Effect.UNSETTLED:
            record_unsettled_event(session, reservation[0])
        call.salvaged = True
        log.warning(
            "refused call %s recorded unsettled unreadable (%d micros held for %s)",
            call.request_id, int(found.meta.reserved_micros), found.meta.account_id,
        )  # fmt: skip

    @staticmethod
    def _refuse_reused(
        session: Session, call: CallState, reservation_id: int, now: datetime
    ) -> None:
        """A second call published under a request id whose reservation another call's request
        entry recorded: it is not that call's redelivery, and must not pass for one (a duplicate's
        stream is deleted unread). It becomes a dead letter, unbilled, with its stream kept for
        whoever settles it by hand; the first call's reservation gets the anomaly, so the alert
        names it. Nothing of the first call changes."""
        meta = call.meta
        if meta is None:
            raise InputError("a call read without its request metadata")
        detail = (
            f"another call was published under this request id (account {meta.account_id}, "
            f"{int(meta.reserved_micros)} micros held); it was dead-lettered unbilled"
        )
        record_anomalies(session, reservation_id, {AnomalyKind.REQUEST_ID_REUSED: detail}, now)
        call.dead_reason = str(RequestIdReused(call.request_id))


def _status(session: Session, request_id: str) -> str | None:
    return session.scalar(select(Reservation.status).where(Reservation.request_id == request_id))
