"""The last step of a batch (``acknowledge``), after its commit and never before: the Redis
effects and the counts.

Contract of ``Acknowledger`` (its work is ``finish``): for each call of a committed batch, in one
pipelined round trip — dead letters written (a refused call's stream deleted, when nothing in the
ledger refers to it or the batch recorded it as ``unreadable``, else its request id quarantined for
the sweeper), settled and voided streams deleted, unsettled calls scheduled for a recheck,
redelivered duplicates' lost after-commit step redone, and every notification acknowledged except a
deferred call's (left pending for a redelivery). A crash before this step redoes the batch, which
changes nothing already committed. With spend control (``authorizations``), then, each call the
batch settled or voided is released in the authorization store at what it was charged, so its
account's unspent hold is spendable again at once; a release that fails is logged and left to the
sync task (``worker.service.authorization``), which finds it missed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from models.anomalies import AnomalyKind
from models.reservations import Reservation
from worker.consumer.calls import Batch, BatchStats, CallState, Redo
from worker.consumer.dead_letters import write_dead_letters
from worker.consumer.steps import Step
from worker.contract.authorization import AuthorizationStore
from worker.contract.entries import dead_letter_fields
from worker.contract.keys import Keys
from worker.core.result import Outcome
from worker.ledger.effects import Effect
from worker.ledger.findings import withdraw_many

log = logging.getLogger(__name__)
# The effects after which a call's hold is released in the authorization store: it is closed.
RELEASING = frozenset({Effect.SETTLED, Effect.SETTLED_LATE, Effect.VOIDED, Effect.VOIDED_LATE})


class Acknowledger(Step[Batch]):
    name = "acknowledge"

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        sessions: Callable[[], Session],
        *,
        recheck_seconds: float,
        dead_letter_maxlen: int,
        authorizations: AuthorizationStore | None = None,
    ) -> None:
        self.authorizations = authorizations
        self.client = client
        self.keys = keys
        self.sessions = sessions
        self.recheck_seconds = recheck_seconds
        self.dead_letter_maxlen = dead_letter_maxlen

    def process(self, batch: Batch) -> None:
        self.finish(batch)

    def finish(self, batch: Batch) -> BatchStats:
        stats, ack, dead = batch.stats, batch.ack, batch.dead
        reserved = self._dead_letters_in_ledger(batch.calls)
        now_ms = int(time.time() * 1000)
        pipe = self.client.pipeline(transaction=False)
        for call in batch.calls:
            if call.effect is Effect.DEFERRED:
                stats.deferred += 1
                continue
            ack.extend(note.entry_id for note in call.notes)
            if call.dead_reason is not None:
                stats.dead += 1
                self._dead_letter(pipe, call, call.request_id in reserved, dead, now_ms)
                continue
            self._settled(pipe, call, stats, now_ms)
        write_dead_letters(pipe, self.keys, dead, self.dead_letter_maxlen)
        if ack:
            pipe.xack(batch.stream, self.keys.group, *ack)
        pipe.execute()
        stats.acked = len(ack)
        if self.authorizations is not None:
            self._release(self.authorizations, batch.calls)
        return stats

    @staticmethod
    def _release(store: AuthorizationStore, calls: list[CallState]) -> None:
        releases = []
        for call in calls:
            if call.effect not in RELEASING or call.dead_reason is not None:
                continue
            source = call.meta or call.result
            if source is None:
                continue
            charged = call.charge_micros if call.outcome is Outcome.SETTLED else 0
            releases.append((source.account_id, call.request_id, charged))
        try:
            store.release_many(releases)
        except redis.RedisError as exc:  # the sync task releases them from the ledger
            log.warning("authorization releases not applied (%d): %s", len(releases), exc)

    def _dead_letter(
        self, pipe: redis.client.Pipeline, call: CallState, reserved: bool, dead: list, now_ms: int
    ) -> None:
        if call.salvaged:
            # Recorded unsettled ``unreadable`` from its money facts in the committed batch: the
            # ledger and this dead letter say all that is kept; its prompt goes now.
            pipe.delete(self.keys.request(call.request_id))
        elif reserved:
            # The sweeper finalizes its hold without reading the refused stream.
            pipe.sadd(self.keys.quarantine, call.request_id)
        elif not call.gave_up:
            # Refused input nothing in the ledger refers to: its prompt goes now.
            pipe.delete(self.keys.request(call.request_id))
        for note in call.notes:
            original = {"kind": note.kind, "request_id": note.request_id}
            dead.append(
                dead_letter_fields("call", call.dead_reason, original, now_ms, note.entry_id)
            )

    def _settled(
        self, pipe: redis.client.Pipeline, call: CallState, stats: BatchStats, now_ms: int
    ) -> None:
        label = str(call.effect or "none")
        stats.effects[label] = stats.effects.get(label, 0) + 1
        if call.effect is Effect.HELD:
            stats.held += 1
            return
        if call.effect is Effect.DUPLICATE:
            stats.duplicates += 1
            if call.redo is Redo.RECHECK:
                when = time.time() + self.recheck_seconds
                pipe.zadd(self.keys.recheck, {call.request_id: when}, nx=True)
            elif call.redo is Redo.DELETE:
                pipe.delete(self.keys.request(call.request_id))
            return
        stats.charged_micros += call.charge_micros
        if call.outcome is Outcome.UNSETTLED:
            stats.unsettled += 1
            reason = call.reason or "unknown"
            stats.reasons[reason] = stats.reasons.get(reason, 0) + 1
            pipe.zadd(self.keys.recheck, {call.request_id: time.time() + self.recheck_seconds})
        else:
            if call.outcome is Outcome.VOID:
                stats.voided += 1
            else:
                stats.settled += 1
            pipe.delete(self.keys.request(call.request_id))
        if call.close_ts is not None:
            stats.latencies_ms.append(max(0, now_ms - call.close_ts))

    def _dead_letters_in_ledger(self, calls: list[CallState]) -> set[str]:
        """For the calls the batch dead-letters: which have a reservation, and each closing one's
        ``no_close`` suspicion withdrawn (its close did come; the sweeper may have finalized it
        first). One short transaction, only when there are dead letters."""
        dead = [call.request_id for call in calls if call.dead_reason is not None]
        if not dead:
            return set()
        closing = [call.request_id for call in calls if call.dead_reason and call.closing]
        with self.sessions() as session, session.begin():
            withdraw_many(session, closing, AnomalyKind.NO_CLOSE)
            return set(
                session.scalars(
                    select(Reservation.request_id).where(Reservation.request_id.in_(dead))
                )
            )
