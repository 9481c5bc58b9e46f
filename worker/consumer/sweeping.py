"""The sweeper's own steps: what it does with a group of calls once the consumer's steps have read
and reconciled them (``Sweep``: a ``Batch`` with the sweeper's facts beside each call).

A group goes through the sweeper's ``read`` chain: the consumer's ``fetch``, the sweeper's
``quiet`` (an abandoned call's stream written to within ``idle_ms`` is left alone), then the
consumer's ``reconcile`` (a sweep call is ``whole``: reconciled without a close); then through one
of two chains, each a transaction step and, after its commit, the Redis effects:

* ``finalize`` (``Finalize``, ``finalize_after``): abandoned calls, each in its own savepoint. A
  call whose stream is gone, refused (by size now, or as input now, or quarantined before) or
  another call's is finalized from its reservation alone: ``unreadable`` (its hold the exposure)
  when its stream was refused, ``incomplete`` when it is gone. A row that fails is its own: the
  savepoint undoes it and the next pass tries it again (the sweeper's policy; the consumer reruns
  its whole transaction instead). After the commit: dead letters, the quarantine mark lifted,
  an unsettled call's recheck scheduled, a decided call's stream deleted.
* ``recheck`` (``Recheck``, ``recheck_after``): unsettled calls whose stream is read again for
  late data; only a settlement is applied (the sweeper's readings never replace a reason). Past
  grace the stream is let go; a stream refused now is dead-lettered and never read again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from sqlalchemy import Row, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from models.anomalies import AnomalyKind
from models.failures import Failure
from models.reservations import Reservation
from worker.consumer.calls import Batch, BatchStats, CallState
from worker.consumer.dead_letters import write_dead_letters
from worker.consumer.salvage import summary, unreadable_result
from worker.consumer.steps import Step
from worker.contract.entries import dead_letter_fields
from worker.contract.keys import Keys
from worker.core.prices import PriceBook
from worker.core.reconcile import reconcile_stream
from worker.core.request import RequestMeta
from worker.core.result import Outcome, Result
from worker.ledger.effects import Effect
from worker.ledger.findings import record_anomalies, record_findings, reservation_of
from worker.ledger.operations import apply_result, other_call

log = logging.getLogger("worker.consumer.sweeper")

# What ``quiet`` marks a call with whose stream is still being written.
STILL_STREAMING = "still streaming"


@dataclass
class SweepStats:
    finalized: int = 0
    rechecked: int = 0
    settled_late: int = 0
    expired: int = 0
    resolved: int = 0
    dead: int = 0
    trimmed: int = 0


def entry_ms(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[0])


@dataclass
class Sweep(Batch):
    """A group of the sweeper's calls (``calls``: one per request, ``whole``), in request-id order,
    with what the sweeper knows of each beside it."""

    sweep: SweepStats = field(default_factory=SweepStats)
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    # finalize: each call's held reservation, and whether its stream was quarantined (refused by
    # the consumer into the dead letters: never read again)
    rows: list[Row[Any]] = field(default_factory=list)
    quarantined: list[bool] = field(default_factory=list)
    # finalize: a stream with an entry this recent is still being written (``quiet``)
    idle_ms: int | None = None
    # what the transaction decided, for the after-commit step
    finished: list[tuple[str, Outcome, bool]] = field(default_factory=list)  # id, outcome, readable
    done: list[str] = field(default_factory=list)
    later: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # id, why

    @classmethod
    def of(cls, kind: str, book: PriceBook, calls: list[CallState], **known: Any) -> Sweep:
        """A group of ``calls`` for the chain ``kind`` (``finalize`` or ``recheck``)."""
        return cls(kind, BatchStats(), book, calls=calls, **known)

    @property
    def kind(self) -> str:
        """The chain that decides this group (a sweep has no notification stream: its name)."""
        return self.stream


def quiet(sweep: Sweep) -> None:
    """The step ``quiet``: a call whose stream had an entry within ``idle_ms`` is not abandoned
    yet: left out of this pass (``STILL_STREAMING``), its stream not reconciled."""
    if sweep.idle_ms is None:
        return
    now_ms = int(time.time() * 1000)
    for index, (call, entries) in enumerate(zip(sweep.calls, sweep.streams, strict=True)):
        if entries and now_ms - entry_ms(entries[-1][0]) < sweep.idle_ms:
            call.effect, call.error = Effect.DEFERRED, STILL_STREAMING
            sweep.streams[index] = []


class _Transaction(Step[Sweep]):
    """A sweep group's one transaction; what it finds recorded as the consumer records it."""

    def __init__(self, sessions: Any, *, hash_salt: str, non_streamable: Any, grace: timedelta):
        self.sessions = sessions
        self.hash_salt = hash_salt
        self.non_streamable = non_streamable
        self.grace = grace

    def _findings(
        self, session: Session, result: Result, effect: str, now: datetime, **known: Any
    ) -> None:
        record_findings(
            session,
            result,
            effect,
            salt=self.hash_salt,
            now=now,
            non_streamable=self.non_streamable,
            **known,
        )


class Finalize(_Transaction):
    """The transaction of a group of abandoned calls (see the module docstring)."""

    name = "finalize_transaction"

    def process(self, sweep: Sweep) -> None:
        now_ms = int(time.time() * 1000)
        rows = zip(sweep.calls, sweep.streams, sweep.rows, sweep.quarantined, strict=True)
        with self.sessions() as session, session.begin():
            for call, entries, row, quarantined in rows:
                if call.effect is Effect.DEFERRED and call.error == STILL_STREAMING:
                    continue
                try:
                    with session.begin_nested():
                        found = self._one(session, sweep, call, row, entries, quarantined)
                        outcome, readable, refusal = found
                except Exception:
                    # One row's failure (a database error, a refusal of the ledger, a bug) is
                    # its own: the savepoint undid it, the rest of the pass goes on, and the next
                    # pass tries this row again.
                    log.exception("sweep of %s deferred", row.request_id)
                    continue
                sweep.sweep.finalized += 1
                sweep.finished.append((row.request_id, outcome, readable))
                if refusal is not None:
                    sweep.sweep.dead += 1
                    original = {"request_id": row.request_id, "kind": "sweep"}
                    sweep.dead.append(dead_letter_fields("sweep", refusal, original, now_ms))

    def _one(
        self,
        session: Session,
        sweep: Sweep,
        call: CallState,
        row: Row[Any],
        entries: list[Any],
        quarantined: bool,
    ) -> tuple[Outcome, bool, str | None]:
        """Finalize one call: its outcome, whether its stream may be read again for late data,
        and why it was refused now (a dead letter), if it was."""
        if call.effect is Effect.DEFERRED:
            raise RuntimeError(f"its reconciliation failed ({call.error})")
        # Refused now: by its size, or as input by ``reconcile`` (never for a quarantined call,
        # which was not read: its ``dead_reason`` only says so).
        refusal = None if quarantined else call.dead_reason
        meta = call.meta if entries and refusal is None else None
        foreign = meta is not None and other_call(row.request_digest, meta.digest)
        # The stream under this id is another call's (the gateway reused the id): nothing in it
        # is this call's. The consumer dead-letters that call; its stream is left for it.
        closed = quarantined or foreign
        unreadable = (quarantined or refusal is not None) and not foreign
        result = call.result
        # A quarantined call's entries are its admission head at most (``fetch``): no stream to
        # reconcile, it is finalized from its reservation below.
        if entries and refusal is None and not foreign and result is None and not quarantined:
            raise RuntimeError("its stream was read but not reconciled")
        if not entries or refusal is not None or foreign or result is None:
            # Gone, refused now, or refused before (quarantined): finalized from the reservation
            # alone, so the hold becomes an unsettled failure someone can resolve, instead of
            # money held for ever.
            meta = RequestMeta(
                request_id=row.request_id,
                account_id=row.account_id,
                model=row.model,
                stream=row.stream,
                include_usage=True,
                reserved_micros=row.reserved_micros,
                created_at=row.created_at,
            )
            result = (
                unreadable_result(meta) if unreadable else reconcile_stream(meta, [], sweep.book)
            )
        effect = apply_result(session, result, now=sweep.now, grace=self.grace)
        # A quarantined call's close came, and was refused: not a ``no_close``.
        self._findings(session, result, effect, sweep.now, meta=meta, closed=closed)
        if unreadable and effect is Effect.UNSETTLED:
            why = refusal or "its stream was refused by the consumer (dead letters)"
            reservation = reservation_of(session, row.request_id)
            if reservation is not None:
                # Why the call is ``unreadable`` (for ``billing show``).
                found = {AnomalyKind.UNREADABLE: summary(why)}
                record_anomalies(session, reservation[0], found, sweep.now)
        return result.outcome, not closed and refusal is None, refusal


class FinalizeAfter(Step[Sweep]):
    """After a ``finalize`` commit: dead letters, quarantine marks lifted, an unsettled call's
    recheck scheduled, a decided call's stream deleted (a refused stream is never read again: it
    expires with its TTL)."""

    name = "finalize_after"

    def __init__(self, client: redis.Redis, keys: Keys, *, recheck_seconds: float, maxlen: int):
        self.client, self.keys = client, keys
        self.recheck_seconds, self.maxlen = recheck_seconds, maxlen

    def process(self, sweep: Sweep) -> None:
        pipe = self.client.pipeline(transaction=False)
        write_dead_letters(pipe, self.keys, sweep.dead, self.maxlen)
        recheck_at = time.time() + self.recheck_seconds
        for request_id, outcome, readable in sweep.finished:
            pipe.srem(self.keys.quarantine, request_id)
            if not readable:
                continue
            if outcome is Outcome.UNSETTLED:
                pipe.zadd(self.keys.recheck, {request_id: recheck_at})
            else:
                pipe.delete(self.keys.request(request_id))
        pipe.execute()


class Recheck(_Transaction):
    """The transaction of a group of unsettled calls read again (see the module docstring)."""

    name = "recheck_transaction"

    def process(self, sweep: Sweep) -> None:
        ids = [call.request_id for call in sweep.calls]
        with self.sessions() as session, session.begin():
            found = session.execute(
                select(Reservation.request_id, Failure.detected_at, Reservation.request_digest)
                .join(Failure, Failure.reservation_id == Reservation.id)
                .where(Reservation.request_id.in_(ids))
            ).all()
            detected = {row.request_id: row.detected_at for row in found}
            digests = {row.request_id: row.request_digest for row in found}
            for call, size, entries in zip(sweep.calls, sweep.sizes, sweep.streams, strict=True):
                sweep.sweep.rechecked += 1
                request_id = call.request_id
                since = detected.get(request_id)
                if size.refusal is not None:
                    sweep.refused.append((request_id, size.refusal))
                    continue
                if not entries or since is None:
                    sweep.done.append(request_id)
                    continue
                if call.dead_reason is not None:  # refused as input by ``reconcile``
                    sweep.refused.append((request_id, call.dead_reason))
                    continue
                if call.meta is not None and other_call(digests.get(request_id), call.meta.digest):
                    # Another call's stream under this id: not late data of this call, and not
                    # this call's to delete (the consumer dead-letters that call).
                    sweep.foreign.append(request_id)
                    continue
                if self._settle(session, sweep, call):
                    sweep.done.append(request_id)
                elif sweep.now - since >= self.grace:
                    sweep.sweep.expired += 1
                    sweep.done.append(request_id)
                else:
                    sweep.later.append(request_id)

    def _settle(self, session: Session, sweep: Sweep, call: CallState) -> bool:
        """Apply the call's result if it now settles (late usage); whether it did."""
        result = call.result
        if result is None or result.outcome is not Outcome.SETTLED:
            return False
        try:
            with session.begin_nested():
                effect = apply_result(session, result, now=sweep.now, grace=self.grace)
                self._findings(session, result, effect, sweep.now)
        except SQLAlchemyError:
            log.exception("recheck of %s failed", call.request_id)
            return False
        if effect is Effect.SETTLED_LATE:
            sweep.sweep.settled_late += 1
        return True


class RecheckAfter(FinalizeAfter):
    """After a ``recheck`` commit: streams let go, rechecks dropped or rescheduled, dead letters
    for the streams refused now (kept until their TTL, never read again)."""

    name = "recheck_after"

    def process(self, sweep: Sweep) -> None:
        now_ms = int(time.time() * 1000)
        pipe = self.client.pipeline(transaction=False)
        for request_id in sweep.done:
            pipe.delete(self.keys.request(request_id))
            pipe.zrem(self.keys.recheck, request_id)
        for request_id in [rid for rid, _why in sweep.refused] + sweep.foreign:
            pipe.zrem(self.keys.recheck, request_id)
        sweep.sweep.dead += len(sweep.refused)
        letters = [
            dead_letter_fields("recheck", why, {"request_id": rid, "kind": "recheck"}, now_ms)
            for rid, why in sweep.refused
        ]
        write_dead_letters(pipe, self.keys, letters, self.maxlen)
        if sweep.later:
            pipe.zadd(
                self.keys.recheck, dict.fromkeys(sweep.later, time.time() + self.recheck_seconds)
            )
        pipe.execute()
