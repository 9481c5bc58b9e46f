"""The consumer: notification batches → reconciled calls → one database commit → acknowledgements.

Contract of ``Consumer.poll`` (may block up to ``block_ms``; safe to call from any number of processes
at once, they share the work through the consumer group):

1. Claim entries another consumer left pending longer than ``claim_idle_ms`` (it died), then read new
   ones, up to ``batch_size`` in all.
2. Size every involved call's stream, then read them in one pipelined round trip: a stream past the
   size limits is refused unread, and the calls past the batch's byte budget (``batch_bytes``) are
   left pending for the next batch of the same drain (``pipeline.reading``).
3. Apply every call in ONE database transaction, each inside its own savepoint, so one bad call neither
   aborts the batch nor is lost: bad input becomes a dead letter; an unexpected database error leaves
   that call's entries unacknowledged, to be claimed and redone later.
4. Only after the commit: write dead letters, acknowledge, delete settled streams, schedule rechecks.
   A crash anywhere before step 4 redoes the batch; every ledger effect is idempotent, so redoing
   changes nothing that was already committed.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from models.anomalies import AnomalyKind
from models.reservations import Reservation, Status
from worker.config import Settings
from worker.errors import ConfigError, InputError, LedgerError, RequestIdReused
from worker.ledger.batch import apply_common
from worker.ledger.findings import (
    columns_of,
    record_anomalies,
    record_findings,
    record_findings_many,
    reservation_of,
    withdraw,
    withdraw_many,
)
from worker.ledger.operations import (
    HoldOutcome,
    apply_result,
    hold,
    is_transient,
    other_call,
    recorded_from,
)
from worker.pipeline.dead_letters import write_dead_letters
from worker.pipeline.entries import (
    Entry,
    Notification,
    dead_letter_fields,
    decode_call,
    parse_notification,
    read_meta,
)
from worker.pipeline.keys import Keys
from worker.pipeline.pricing import PriceSource
from worker.pipeline.reading import (
    StreamSize,
    raw_stream_pipeline,
    read_streams,
    size_streams,
    within_budget,
)
from worker.prices import PriceBook
from worker.reconcile import reconcile_response, reconcile_stream
from worker.request import RequestMeta
from worker.result import Outcome, Reason, Result
from worker.upstream.routes import record_routes

__all__ = ["BatchStats", "Consumer", "raw_stream_pipeline", "reconcile_call", "reconcile_record"]

log = logging.getLogger(__name__)

# A call whose processing fails this many times (not bad input: a bug or a persistent database
# error) is dead-lettered instead of being claimed again.
MAX_DELIVERIES = 5
# Attempts at one batch's transaction when it fails on a transient database error.
TRANSACTION_ATTEMPTS = 4


class _Retry(Exception):
    """Raised inside a batch's transaction to roll all of it back and run it again."""


FINAL_STATUSES = frozenset(
    {Status.SETTLED, Status.VOIDED, Status.RELEASED, Status.SETTLED_FROM_ESTIMATE}
)


@dataclass
class BatchStats:
    read: int = 0
    held: int = 0
    settled: int = 0
    unsettled: int = 0
    voided: int = 0
    duplicates: int = 0
    dead: int = 0
    deferred: int = 0
    acked: int = 0
    effects: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    charged_micros: int = 0
    retries: int = 0  # batch transactions rolled back on a transient error and run again
    latencies_ms: list[int] = field(default_factory=list)

    def add(self, other: BatchStats) -> None:
        for name in ("read", "held", "settled", "unsettled", "voided", "duplicates", "dead"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.deferred += other.deferred
        self.retries += other.retries
        self.acked += other.acked
        for key, value in other.effects.items():
            self.effects[key] = self.effects.get(key, 0) + value
        for key, value in other.reasons.items():
            self.reasons[key] = self.reasons.get(key, 0) + value
        self.charged_micros += other.charged_micros
        self.latencies_ms.extend(other.latencies_ms)


def reconcile_record(entries: list[Entry], request_id: str, book: PriceBook) -> Result:
    """Decode a call's stream and reconcile it (raises ``InputError`` for unusable streams)."""
    return reconcile_call(entries, request_id, book)[1]


def reconcile_call(
    entries: list[Entry], request_id: str, book: PriceBook
) -> tuple[RequestMeta, Result]:
    """``reconcile_record`` with the request metadata it decoded (for the parity fingerprint)."""
    record = decode_call(entries, request_id)
    if record.streamed:
        return record.meta, reconcile_stream(record.meta, record.frames, book)
    assert record.response_status is not None
    return record.meta, reconcile_response(
        record.meta, record.response_status, record.response_body or b"", book
    )


@dataclass
class _Batch:
    """A batch of notification entries read and reconciled, not yet applied."""

    stream: str
    stats: BatchStats
    book: PriceBook
    ack: list[bytes] = field(default_factory=list)
    dead: list[dict[str, Any]] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    # Each call's stream, cut to its first entry once reconciled (``prepare``).
    streams: list[list[Entry]] = field(default_factory=list)
    # Notification entries of the calls past the byte budget: the next batch, still pending.
    rest: list[tuple[bytes, Any]] = field(default_factory=list)


@dataclass
class _Call:
    """The notifications of one request inside a batch, and what became of them."""

    request_id: str
    notes: list[Notification] = field(default_factory=list)
    effect: str | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    charge_micros: int = 0
    dead_reason: str | None = None
    error: str | None = None
    close_ts: int | None = None
    meta: RequestMeta | None = None
    result: Result | None = None
    held_here: bool = False  # this batch recorded the hold
    # A redelivered close whose result was committed before: the after-commit step to redo.
    redo: str | None = None
    gave_up: bool = False  # dead-lettered as poison, not as bad input: its stream is kept

    def transaction_state(self) -> tuple[Any, ...]:
        """What a batch transaction may change on this call, to restore when it is rolled back."""
        return (
            self.effect, self.outcome, self.reason, self.charge_micros, self.dead_reason,
            self.error, self.held_here, self.redo,
        )  # fmt: skip

    def restore(self, state: tuple[Any, ...]) -> None:
        (
            self.effect, self.outcome, self.reason, self.charge_micros, self.dead_reason,
            self.error, self.held_here, self.redo,
        ) = state  # fmt: skip

    @property
    def closing(self) -> bool:
        return any(note.kind == "close" for note in self.notes)

    @property
    def opened(self) -> bool:
        return any(note.kind == "open" for note in self.notes)


class Consumer:
    def __init__(
        self,
        client: redis.Redis,
        sessions: Callable[[], Session],
        settings: Settings,
        *,
        name: str,
        prices: PriceSource | None = None,
        recheck_seconds: float = 30.0,
    ) -> None:
        if not settings.hash_salt:
            # Without the fingerprint key the findings cannot be written: refused here, at once,
            # rather than a worker that drops every batch off its fast path (``fingerprint_key``).
            raise ConfigError("the consumer needs the fingerprint key (settings.hash_salt)")
        self.client = client
        self.sessions = sessions
        self.settings = settings
        self.keys = Keys(settings.prefix, settings.partitions)
        self.name = name
        self.prices = prices or PriceSource(sessions, settings.price_book)
        self.recheck_seconds = recheck_seconds
        self.grace = timedelta(seconds=settings.grace_seconds)
        self._groups_ready: set[str] = set()
        self._prefetch: ThreadPoolExecutor | None = None

    # -- reading -------------------------------------------------------------------------------

    def ensure_group(self, stream: str) -> None:
        """Create the consumer group from the stream's start, so nothing written before is missed."""
        if stream in self._groups_ready:
            return
        try:
            self.client.xgroup_create(stream, self.keys.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups_ready.add(stream)

    def read(self, stream: str, block_ms: int | None) -> list[tuple[bytes, Any]]:
        self.ensure_group(stream)
        count = self.settings.batch_size
        _, claimed, *_ = self.client.xautoclaim(
            stream, self.keys.group, self.name, self.settings.claim_idle_ms, "0-0", count=count
        )
        entries = list(claimed)
        if len(entries) < count:
            reply = self.client.xreadgroup(
                self.keys.group,
                self.name,
                {stream: ">"},
                count=count - len(entries),
                block=None if entries or block_ms is None else block_ms,
            )
            for _stream, new in reply or ():
                entries.extend(new)
        return entries

    def poll(self, partition: int = 0, block_ms: int | None = 200) -> BatchStats:
        stream = self.keys.events(partition)
        entries = self.read(stream, block_ms)
        if not entries:
            return BatchStats()
        return self.process(stream, entries)

    def drain(
        self,
        partition: int = 0,
        seconds: float = 1.0,
        block_ms: int | None = 200,
        *,
        until_idle: bool = False,
        stream: str | None = None,
    ) -> BatchStats:
        """Poll repeatedly for about ``seconds`` (``until_idle``: or until a read finds nothing);
        what a Celery task runs each time it is called. ``stream``: a notification stream by name
        instead of the ``partition``'s (a retired one, ``worker.pipeline.partitions``).

        Pipelined: while one batch is applied (the database transaction, mostly a wait for
        PostgreSQL), the next is read and reconciled in a helper thread (Redis round trips and
        pure CPU work), so each stage's waits hide behind the other's work. Batches are still
        applied one at a time, in the order they were read, each acknowledged only after its own
        commit; ``drain`` returns only once every batch it read has been applied. The helper
        thread touches Redis only: prices are read here, between transactions.
        """
        stream = stream or self.keys.events(partition)
        total = BatchStats()
        deadline = time.monotonic() + seconds
        reader = self._reader()
        pending = reader.submit(self._read_batch, stream, block_ms, self.prices.current(), [])
        try:
            while True:
                batch = pending.result()
                rest = [] if batch is None else batch.rest
                more = bool(rest) or (
                    time.monotonic() < deadline and not (until_idle and batch is None)
                )
                if more:
                    pending = reader.submit(
                        self._read_batch, stream, block_ms, self.prices.current(), rest
                    )
                if batch is not None:
                    total.add(self.apply(batch))
                if not more:
                    return total
        finally:
            # On an error, let the read in flight finish: what it read stays pending in the
            # group and is claimed again after claim_idle_ms, like any batch a crash left.
            wait([pending])

    def _reader(self) -> ThreadPoolExecutor:
        if self._prefetch is None:
            self._prefetch = ThreadPoolExecutor(1, thread_name_prefix="billing-read")
        return self._prefetch

    def _read_batch(
        self, stream: str, block_ms: int | None, book: PriceBook, rest: list[tuple[bytes, Any]]
    ) -> _Batch | None:
        """The next batch: what the last one left past its byte budget, else new entries."""
        entries = self._keep(stream, rest) if rest else self.read(stream, block_ms)
        return self.prepare(stream, entries, book) if entries else None

    def _keep(self, stream: str, rest: list[tuple[bytes, Any]]) -> list[tuple[bytes, Any]]:
        """Entries left past a batch's budget, still pending here: reset their idle time, so no
        other consumer claims them while this one works through the batches before them, and drop
        any another consumer has claimed and acknowledged meanwhile."""
        ids = [entry_id for entry_id, _fields in rest]
        kept = set(self.client.xclaim(stream, self.keys.group, self.name, 0, ids, justid=True))
        return [entry for entry in rest if entry[0] in kept]

    # -- processing ----------------------------------------------------------------------------

    def _fetch_streams(self, calls: list[_Call], sizes: list[StreamSize]) -> list[list[Entry]]:
        """Each call's stream as far as it was sized: whole for a close, the request entry for an
        open; nothing for a refused call or a missing stream."""
        reads = []
        for call, size in zip(calls, sizes, strict=True):
            count = 0 if call.dead_reason is not None else size.entries
            reads.append((call.request_id, count if call.closing else min(count, 1)))
        return read_streams(self.client, self.keys, reads)

    def process(self, stream: str, entries: list[tuple[bytes, Any]]) -> BatchStats:
        """Apply notification entries: ``prepare`` then ``apply``, batch after batch until what
        each left past its byte budget is done too."""
        total = BatchStats()
        while entries:
            # Prices are read before the batch transaction: on SQLite a second connection inside
            # it would wait for the write lock this one holds.
            batch = self.prepare(stream, entries, self.prices.current())
            total.add(self.apply(batch))
            entries = self._keep(stream, batch.rest) if batch.rest else []
        return total

    def prepare(self, stream: str, entries: list[tuple[bytes, Any]], book: PriceBook) -> _Batch:
        """Group the entries by call, size the calls' streams, read and reconcile those within the
        batch's byte budget: Redis reads and pure work, nothing written anywhere (safe to run while
        another batch is applied). The entries of the calls past the budget are ``batch.rest``."""
        batch = _Batch(stream, BatchStats(), book)
        now_ms = int(time.time() * 1000)
        calls: dict[str, _Call] = {}
        for entry_id, fields in entries:
            if fields is None:  # deleted from the stream while pending
                batch.ack.append(entry_id)
                continue
            try:
                note = parse_notification(entry_id, fields)
            except InputError as exc:
                batch.dead.append(
                    dead_letter_fields("notification", str(exc), fields, now_ms, entry_id)
                )
                batch.ack.append(entry_id)
                continue
            call = calls.setdefault(note.request_id, _Call(note.request_id))
            call.notes.append(note)
            if note.kind == "close" and note.ts is not None:
                call.close_ts = note.ts

        # Calls are applied in request-id order so that two consumers whose batches share calls (an
        # open read by one, its close by the other) take their reservation locks in the same order:
        # in arrival order, each batch-long transaction waited for the other's and PostgreSQL broke
        # the cycle with a deadlock error, deferring calls until claim_idle_ms had passed.
        ordered = sorted(calls.values(), key=lambda call: call.request_id)
        sizes = size_streams(self.client, self.keys, [call.request_id for call in ordered])
        for call, size in zip(ordered, sizes, strict=True):
            call.dead_reason = size.refusal
        taken = within_budget([size.cost for size in sizes], self.settings.batch_bytes)
        later = {note.entry_id for call in ordered[taken:] for note in call.notes}
        batch.rest = [entry for entry in entries if entry[0] in later]
        batch.stats.read = len(entries) - len(batch.rest)
        batch.calls = ordered[:taken]
        streams = self._fetch_streams(batch.calls, sizes[:taken])
        self._prepare(batch.calls, streams, book)
        # Reconciled, a stream is needed no more than its first entry (``_apply`` asks whether
        # the stream exists): the rest is let go now, not when the batch is committed.
        batch.streams = [call_entries[:1] for call_entries in streams]
        return batch

    def apply(self, batch: _Batch) -> BatchStats:
        """Apply a prepared batch in one transaction, then dead-letter and acknowledge (after the
        commit, never before).

        A deadlock, serialization failure or lost connection (``is_transient``) rolls the whole
        transaction back and runs it again, up to ``TRANSACTION_ATTEMPTS`` times with a jittered
        pause: the other transaction of a deadlock then finds the locks free, and nothing of the
        batch is deferred to a redelivery ``claim_idle_ms`` later. Past the last attempt, the calls
        still failing are deferred like any other database error."""
        stream, stats, ack, dead = batch.stream, batch.stats, batch.ack, batch.dead
        ordered, streams, book = batch.calls, batch.streams, batch.book
        before = [call.transaction_state() for call in ordered]
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            now = datetime.now(UTC)
            try:
                self._transaction(ordered, streams, book, now, last=attempt == TRANSACTION_ATTEMPTS)
                break
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
            stats.retries += 1
            for call, state in zip(ordered, before, strict=True):
                call.restore(state)
            time.sleep(random.uniform(0.01, 0.05) * attempt)
        now_ms = int(time.time() * 1000)
        self._give_up_on_poison(stream, ordered)
        reserved = self._dead_letters_in_ledger(ordered)

        pipe = self.client.pipeline(transaction=False)
        done_ms = int(time.time() * 1000)
        for call in ordered:
            if call.effect == "deferred":
                stats.deferred += 1
                continue
            ack.extend(note.entry_id for note in call.notes)
            if call.dead_reason is not None:
                stats.dead += 1
                if call.request_id in reserved:
                    # The sweeper finalizes its hold without reading the refused stream.
                    pipe.sadd(self.keys.quarantine, call.request_id)
                elif not call.gave_up:
                    # Refused input nothing in the ledger refers to: its prompt goes now.
                    pipe.delete(self.keys.request(call.request_id))
                for note in call.notes:
                    original = {"kind": note.kind, "request_id": note.request_id}
                    dead.append(
                        dead_letter_fields(
                            "call", call.dead_reason, original, now_ms, note.entry_id
                        )
                    )
                continue
            stats.effects[call.effect or "none"] = stats.effects.get(call.effect or "none", 0) + 1
            if call.effect == "held":
                stats.held += 1
                continue
            if call.effect == "duplicate":
                stats.duplicates += 1
                if call.redo == "recheck":
                    when = time.time() + self.recheck_seconds
                    pipe.zadd(self.keys.recheck, {call.request_id: when}, nx=True)
                elif call.redo == "delete":
                    pipe.delete(self.keys.request(call.request_id))
                continue
            key = self.keys.request(call.request_id)
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
                pipe.delete(key)
            if call.close_ts is not None:
                stats.latencies_ms.append(max(0, done_ms - call.close_ts))
        write_dead_letters(pipe, self.keys, dead, self.settings.dead_letter_maxlen)
        if ack:
            pipe.xack(stream, self.keys.group, *ack)
        pipe.execute()
        stats.acked = len(ack)
        return stats

    def _transaction(
        self,
        ordered: list[_Call],
        streams: list[list[Entry]],
        book: PriceBook,
        now: datetime,
        *,
        last: bool,
    ) -> None:
        """One attempt at the batch's transaction. A transient error on one call raises ``_Retry``
        (the whole transaction is rolled back) unless this is the ``last`` attempt."""
        with self.sessions() as session, session.begin():
            self._apply_common(session, ordered, now)
            for call, call_entries in zip(ordered, streams, strict=True):
                if call.effect is not None or call.dead_reason is not None:
                    continue
                try:
                    with session.begin_nested():
                        self._apply(session, call, call_entries, now, book)
                except InputError as exc:
                    call.dead_reason = str(exc)
                except LedgerError as exc:
                    call.dead_reason = f"ledger refused: {exc}"
                except Exception as exc:
                    if is_transient(exc) and not last:
                        raise _Retry from exc
                    # A database hiccup or a bug: leave it pending to be claimed and redone; the
                    # savepoint kept the rest of the batch. Poison is capped below.
                    log.exception("call %s deferred", call.request_id)
                    call.effect = "deferred"
                    call.dead_reason = None
                    call.error = type(exc).__name__
            # Where each call went upstream (``worker.upstream.routes``), with its hold.
            record_routes(
                session,
                [
                    call.meta
                    for call in ordered
                    if call.meta is not None
                    and call.dead_reason is None
                    and call.effect not in (None, "deferred")
                ],
            )

    def _give_up_on_poison(self, stream: str, calls: list[_Call]) -> None:
        """A call deferred on its ``MAX_DELIVERIES``-th delivery becomes a dead letter, so one call
        that always fails cannot keep its notifications pending for ever."""
        deferred = [call for call in calls if call.effect == "deferred"]
        if not deferred:
            return
        pipe = self.client.pipeline(transaction=False)
        for call in deferred:
            first = call.notes[0].entry_id
            pipe.xpending_range(stream, self.keys.group, min=first, max=first, count=1)
        for call, pending in zip(deferred, pipe.execute(), strict=True):
            delivered = pending[0]["times_delivered"] if pending else 0
            if delivered >= MAX_DELIVERIES:
                call.effect = None
                call.dead_reason = f"gave up after {delivered} deliveries: {call.error}"
                call.gave_up = True

    def _dead_letters_in_ledger(self, calls: list[_Call]) -> set[str]:
        """After the batch's commit, for the calls it dead-letters: which have a reservation, and
        each closing one's ``no_close`` suspicion withdrawn (its close did come; the sweeper may
        have finalized it first). One short transaction, only when there are dead letters."""
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

    @staticmethod
    def _prepare(calls: list[_Call], streams: list[list[Entry]], book: PriceBook) -> None:
        """Decode and reconcile every call before the transaction (pure work, no IO): a call whose
        stream is unusable is a dead letter before the database is touched."""
        for call, entries in zip(calls, streams, strict=True):
            if not entries:
                continue  # what a missing stream means depends on the ledger: see _apply
            try:
                if call.closing:
                    call.meta, call.result = reconcile_call(entries, call.request_id, book)
                else:
                    call.meta = read_meta(entries, call.request_id)
            except InputError as exc:
                call.dead_reason = str(exc)
            except Exception as exc:  # a bug on one call's input: defer it like a database error
                log.exception("call %s deferred", call.request_id)
                call.effect, call.error = "deferred", type(exc).__name__

    def _apply_common(self, session: Session, calls: list[_Call], now: datetime) -> None:
        """The batch's fresh holds, plain settlements and failures in a few statements
        (``ledger.batch``).

        Runs in a savepoint: if a bulk statement fails (a race with another consumer on a unique
        key), nothing of it stays and every call takes the per-call path instead.
        """
        usable = [
            call
            for call in calls
            if call.meta is not None and call.dead_reason is None and call.effect is None
        ]
        if not usable:
            return
        holds = [call.meta for call in usable if call.meta is not None]
        results = [call.result for call in usable if call.result is not None]
        try:
            with session.begin_nested():
                closing = [(c.meta, c.result) for c in usable if c.meta and c.result]
                columns = columns_of(closing, self.settings.hash_salt)
                applied = apply_common(session, holds, results, now=now, columns=columns)
                decided = []
                for call in usable:
                    if call.result is None:
                        continue
                    effect, found = "settled", applied.settled.get(call.request_id)
                    if found is None:
                        effect, found = "unsettled", applied.unsettled.get(call.request_id)
                    if found is None:
                        continue
                    opened = call.opened or call.request_id not in applied.held
                    decided.append((found, call.result, opened, effect))
                record_findings_many(
                    session, decided, now=now, non_streamable=self.settings.non_streamable_models
                )
        except Exception:
            log.warning(
                "batched ledger path failed; applying this batch call by call", exc_info=True
            )
            return
        for call in usable:
            call.held_here = call.request_id in applied.held
            if call.request_id in applied.settled and call.result is not None:
                call.effect, call.outcome = "settled", Outcome.SETTLED
                call.charge_micros = int(call.result.charge_micros or 0)
            elif call.request_id in applied.unsettled and call.result is not None:
                call.effect, call.outcome = "unsettled", Outcome.UNSETTLED
                call.reason = str(call.result.reason)
            elif call.held_here and not call.closing:
                call.effect = "held"

    def _apply(
        self, session: Session, call: _Call, entries: list[Entry], now: datetime, book: PriceBook
    ) -> None:
        recorded = None
        if entries:
            assert call.meta is not None
            recorded = recorded_from(session, call.request_id)
            if recorded is not None and other_call(recorded.request_digest, call.meta.digest):
                self._refuse_reused(session, call, recorded.id, now)
                return
        if not call.closing:
            if not entries:
                if self._status(session, call.request_id) is not None:
                    withdraw(session, call.request_id, AnomalyKind.NO_OPEN)  # close came first
                    call.effect = "duplicate"
                    return
                raise InputError("open for a stream that does not exist")
            assert call.meta is not None
            if hold(session, call.meta, now=now) is HoldOutcome.DUPLICATE:
                withdraw(session, call.request_id, AnomalyKind.NO_OPEN)
            call.effect = "held"
            return
        if not entries:
            if self._status(session, call.request_id) not in (None, Status.HELD):
                withdraw(session, call.request_id, AnomalyKind.NO_CLOSE)  # swept before its close
                call.effect = "duplicate"
                return
            raise InputError("close for a stream that does not exist")
        meta, result = call.meta, call.result
        assert meta is not None and result is not None
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
        call.effect = apply_result(session, result, now=now, grace=self.grace)
        if call.effect in ("duplicate", "final"):
            withdraw(session, call.request_id, AnomalyKind.NO_CLOSE)
        record_findings(
            session,
            result,
            call.effect,
            salt=self.settings.hash_salt,
            now=now,
            non_streamable=self.settings.non_streamable_models,
            meta=meta,
            reservation=reservation,
            opened=opened or reservation is not None,
        )
        call.reason = None if result.reason is None else str(result.reason)
        if call.effect == "duplicate":
            # The first delivery committed, but its after-commit step (schedule the recheck, or
            # delete the stream) shares a pipeline with its XACK and is lost with it when Redis
            # or the worker goes down in between: redo it, or late usage never settles the call.
            status = self._status(session, call.request_id)
            if status == Status.UNSETTLED:
                call.redo = "recheck"
            elif status in FINAL_STATUSES:
                call.redo = "delete"
        if call.effect == "unsettled" and result.outcome is Outcome.SETTLED:
            # The stream settled but the ledger could not price it: flagged like any failure.
            call.outcome, call.reason = Outcome.UNSETTLED, str(Reason.UNPRICED)
        if call.effect in ("settled", "settled_late") and result.charge_micros is not None:
            call.charge_micros = int(result.charge_micros)

    @staticmethod
    def _refuse_reused(session: Session, call: _Call, reservation_id: int, now: datetime) -> None:
        """A second call published under a request id whose reservation another call's request
        entry recorded: it is not that call's redelivery, and must not pass for one (a duplicate's
        stream is deleted unread). It becomes a dead letter, unbilled, with its stream kept for
        whoever settles it by hand; the first call's reservation gets the anomaly, so the alert
        names it. Nothing of the first call changes."""
        assert call.meta is not None
        detail = (
            f"another call was published under this request id (account {call.meta.account_id}, "
            f"{int(call.meta.reserved_micros)} micros held); it was dead-lettered unbilled"
        )
        record_anomalies(session, reservation_id, {AnomalyKind.REQUEST_ID_REUSED: detail}, now)
        call.dead_reason = str(RequestIdReused(call.request_id))

    @staticmethod
    def _status(session: Session, request_id: str) -> str | None:
        return session.scalar(
            select(Reservation.status).where(Reservation.request_id == request_id)
        )
