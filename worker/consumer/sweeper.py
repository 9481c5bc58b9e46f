"""The sweeper: finishes what notifications alone cannot, with the consumer's steps and its own policy.

* Calls whose ``close`` never came (a gateway crash): a reservation still ``held`` whose stream has had
  no new entry for ``sweep_idle_ms`` is reconciled from what is there. A stream with finish and usage
  settles; one without is ``incomplete``; one that expired away is ``incomplete`` with nothing assembled.
  Without a close the sweeper cannot know the stream ended, so its failure is provisional: a close
  that comes after all (the gateway was only slow) decides the call within grace: it settles it
  late, voids it, or replaces the failure's reason with its own (``transitions``). The sweeper's own
  readings, here and in the recheck, never replace a reason.
* Late data: an unsettled call's stream is kept through the grace period and reconciled again on a
  schedule (the ``recheck`` sorted set), so a usage frame that arrived after ``close`` still settles it.
  At the end of grace the stream is deleted and the resolve policy decides the hold.
* Streams are sized before they are read and read in groups within the byte budget by the consumer's
  own step ``fetch`` (``consumer.steps``: a wrapped or replaced ``fetch`` reads for both); a stream
  refused (past the limits, undecodable, or quarantined by the consumer) is dead-lettered once and
  never read again: its call is finalized or left to the resolve policy from the reservation alone.

What the sweeper does differently from the consumer is its ``SweepPolicy``: which calls it picks
(held reservations idle for ``idle_ms``, at most ``limit`` a pass over ``max_pages`` pages), when an
unsettled call is read again (``recheck_seconds``), the grace period and the resolve policy.

Each pass works in bounded batches and commits per batch, so it is safe to run from any process at any
time: every effect goes through the idempotent ledger operations; dead letters and the Redis effects
follow the commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from sqlalchemy import Row, select, tuple_
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from models.anomalies import AnomalyKind
from models.failures import Failure
from models.reservations import Reservation, Status
from worker.consumer import partitions
from worker.consumer.calls import Batch, BatchStats, CallState
from worker.consumer.consumer import Consumer
from worker.consumer.dead_letters import write_dead_letters
from worker.consumer.reading import StreamSize, size_streams, within_budget
from worker.consumer.reconciling import reconcile_call
from worker.consumer.salvage import summary, unreadable_result
from worker.contract.entries import Entry, dead_letter_fields
from worker.core.errors import InputError
from worker.core.prices import PriceBook
from worker.core.reconcile import reconcile_stream
from worker.core.request import RequestMeta
from worker.core.result import Outcome, Result
from worker.ledger.effects import Effect
from worker.ledger.findings import record_anomalies, record_findings, reservation_of
from worker.ledger.operations import apply_result, other_call, resolve_expired

log = logging.getLogger(__name__)

# Pages of ``limit`` held reservations a sweep pass looks through for abandoned calls.
MAX_PAGES = 20
# The id of a stream's last entry (or nil), without sending the entry: read in Redis, so a stream
# whose last entry is huge costs the sweeper nothing to look at (one key: Redis Cluster safe).
LAST_ENTRY_ID = """
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if last[1] then return last[1][1] end
return false
"""


@dataclass
class SweepStats:
    finalized: int = 0
    rechecked: int = 0
    settled_late: int = 0
    expired: int = 0
    resolved: int = 0
    dead: int = 0
    trimmed: int = 0


def _stream_id(value: bytes | str) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else value
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _entry_ms(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[0])


@dataclass(frozen=True)
class SweepPolicy:
    """What the sweeper does that the consumer does not (see the module docstring)."""

    idle_ms: int  # a held call's stream silent this long is abandoned
    limit: int  # calls a pass looks at, per kind
    recheck_seconds: float  # an unsettled call's stream is read again this long after
    grace: timedelta  # late data may settle a call this long after its failure
    resolve: str  # what becomes of a failure past grace (``settings.resolve_policy``)
    max_pages: int = MAX_PAGES

    @classmethod
    def of(cls, consumer: Consumer, limit: int) -> SweepPolicy:
        settings = consumer.settings
        return cls(
            idle_ms=settings.sweep_idle_ms,
            limit=limit,
            recheck_seconds=consumer.recheck_seconds,
            grace=consumer.grace,
            resolve=settings.resolve_policy,
        )


class Sweeper:
    def __init__(
        self, consumer: Consumer, *, limit: int = 500, policy: SweepPolicy | None = None
    ) -> None:
        self.consumer = consumer
        self.client = consumer.client
        self.keys = consumer.keys
        self.settings = consumer.settings
        self.policy = policy or SweepPolicy.of(consumer, limit)
        self.limit = self.policy.limit
        self._last_id = self.client.register_script(LAST_ENTRY_ID)

    def _read(
        self,
        request_ids: Sequence[str],
        sizes: Sequence[StreamSize],
        unread: Sequence[bool],
        book: PriceBook,
    ) -> list[list[Entry]]:
        """Each call's stream whole as it was sized, but for the ``unread`` ones and those refused
        by their size: the consumer's step ``fetch``, in one round trip."""
        batch = Batch("sweep", BatchStats(), book)
        batch.calls = [
            CallState(request_id, whole=True, dead_reason="unread" if skip else size.refusal)
            for request_id, size, skip in zip(request_ids, sizes, unread, strict=True)
        ]
        batch.sizes = list(sizes)
        self.consumer.steps["fetch"].process(batch)
        return batch.streams

    def _within_budget(self, costs: Sequence[int]) -> Iterator[slice]:
        """The calls in groups whose streams fit the byte budget (``batch_bytes``), in order."""
        start = 0
        while start < len(costs):
            end = start + within_budget(costs[start:], self.settings.batch_bytes)
            yield slice(start, end)
            start = end

    def run(self) -> SweepStats:
        stats = SweepStats()
        self.finalize_abandoned(stats)
        self.recheck_unsettled(stats)
        self.apply_policy(stats)
        self.trim_notifications(stats)
        return stats

    def trim_notifications(self, stats: SweepStats) -> None:
        """Drop notifications every consumer is done with, so the streams do not grow for ever.

        Safe point: below the oldest entry still pending in our group (delivered, not yet
        acknowledged: it may be claimed and redone), and never past the group's last delivered
        entry (what comes after has not been read). Other groups on the stream, if any, are
        respected the same way. Retired streams (``partitions``) are trimmed like partitions.
        """
        for stream in partitions.streams(self.client, self.keys):
            try:
                groups = self.client.xinfo_groups(stream)
            except redis.ResponseError:
                continue  # no such stream yet
            if not groups:
                continue
            floors = []
            for group in groups:
                floor = group["last-delivered-id"]
                if group["pending"]:
                    summary = self.client.xpending(stream, group["name"])
                    floor = min(floor, summary["min"], key=_stream_id)
                floors.append(floor)
            minid = min(floors, key=_stream_id)
            if _stream_id(minid) > (0, 0):
                stats.trimmed += self.client.xtrim(stream, minid=minid, approximate=False)

    def abandoned(self, now: datetime) -> list[Row[Any]]:
        """Up to ``limit`` held reservations whose stream has been silent for ``sweep_idle_ms``
        (or is quarantined, or gone), oldest first.

        Pages past the calls that are still streaming (an old reservation with fresh entries), at
        most ``MAX_PAGES`` pages a pass, so a crowd of long calls never hides an abandoned one
        behind it until its stream expires. Only each stream's last entry is read here."""
        idle = timedelta(milliseconds=self.policy.idle_ms)
        now_ms = int(now.timestamp() * 1000)
        query = (
            select(
                Reservation.id,
                Reservation.request_id,
                Reservation.account_id,
                Reservation.model,
                Reservation.stream,
                Reservation.reserved_micros,
                Reservation.created_at,
                Reservation.updated_at,
                Reservation.request_digest,
            )
            .where(Reservation.status == Status.HELD, Reservation.updated_at < now - idle)
            .order_by(Reservation.updated_at, Reservation.id)
            .limit(self.limit)
        )
        found: list[Row[Any]] = []
        after: tuple[datetime, int] | None = None
        for _page in range(self.policy.max_pages):
            page = query
            if after is not None:
                page = page.where(tuple_(Reservation.updated_at, Reservation.id) > tuple_(*after))
            with self.consumer.sessions() as session:
                rows = session.execute(page).all()
            if not rows:
                break
            pipe = self.client.pipeline(transaction=False)
            for row in rows:
                self._last_id(keys=[self.keys.request(row.request_id)], client=pipe)
                pipe.sismember(self.keys.quarantine, row.request_id)
            probes = pipe.execute()
            for index, row in enumerate(rows):
                last, quarantined = probes[2 * index], probes[2 * index + 1]
                quiet = not last or now_ms - _entry_ms(last) >= self.policy.idle_ms
                if quarantined or quiet:
                    found.append(row)
            after = (rows[-1].updated_at, rows[-1].id)
            if len(found) >= self.limit or len(rows) < self.limit:
                break
        return found[: self.limit]

    def finalize_abandoned(self, stats: SweepStats) -> None:
        """Finalize the abandoned calls, in groups whose streams fit the byte budget
        (``batch_bytes``), one transaction per group, each row in its own savepoint."""
        now = datetime.now(UTC)
        # Locks are taken in request-id order, as the consumer takes them (``gathering.group``).
        rows = sorted(self.abandoned(now), key=lambda row: row.request_id)
        if not rows:
            return
        pipe = self.client.pipeline(transaction=False)
        for row in rows:
            pipe.sismember(self.keys.quarantine, row.request_id)
        quarantined = [bool(member) for member in pipe.execute()]
        sizes = size_streams(self.client, self.keys, [row.request_id for row in rows])
        # A quarantined stream was refused into the dead letters: it is not read again.
        costs = [0 if q else size.cost for q, size in zip(quarantined, sizes, strict=True)]
        for group in self._within_budget(costs):
            self._finalize(rows[group], quarantined[group], sizes[group], now, stats)

    def _finalize(
        self,
        rows: list[Row[Any]],
        quarantined: list[bool],
        sizes: list[StreamSize],
        now: datetime,
        stats: SweepStats,
    ) -> None:
        book = self.consumer.prices.current()
        fetched = self._read([row.request_id for row in rows], sizes, quarantined, book)
        now_ms = int(time.time() * 1000)
        dead = []
        # (request id, outcome, whether its stream may be read again for late data)
        finished: list[tuple[str, Outcome, bool]] = []
        with self.consumer.sessions() as session, session.begin():
            for row, q, size, entries in zip(rows, quarantined, sizes, fetched, strict=True):
                refusal = None if q else size.refusal
                if entries and now_ms - _entry_ms(entries[-1][0]) < self.policy.idle_ms:
                    continue  # still being written: not abandoned yet
                try:
                    with session.begin_nested():
                        meta = None
                        if entries:
                            try:
                                meta, result = reconcile_call(entries, row.request_id, book)
                            except InputError as exc:
                                refusal = str(exc)
                        refused = q or refusal is not None
                        foreign = meta is not None and other_call(row.request_digest, meta.digest)
                        if foreign:
                            # The stream under this id is another call's (the gateway reused the
                            # id): nothing in it is this call's. The consumer dead-letters that
                            # call; its stream is left for it, never read for this one.
                            q = True
                        unreadable = refused and not foreign
                        if not entries or refusal is not None or foreign:
                            # Gone, refused now, or refused before (quarantined): finalized from
                            # the reservation alone, so the hold becomes an unsettled failure
                            # someone can resolve, instead of money held for ever: ``unreadable``
                            # (its exposure the hold) when its stream was refused, ``incomplete``
                            # when it is gone.
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
                                unreadable_result(meta)
                                if unreadable
                                else reconcile_stream(meta, [], book)
                            )
                        effect = apply_result(session, result, now=now, grace=self.policy.grace)
                        # A quarantined call's close came, and was refused: not a ``no_close``.
                        self._findings(session, result, effect, now, meta=meta, closed=q)
                        if unreadable and effect is Effect.UNSETTLED:
                            why = refusal or "its stream was refused by the consumer (dead letters)"
                            self._unreadable(session, row.request_id, why, now)
                except Exception:
                    # One row's failure (a database error, a refusal of the ledger, a bug) is
                    # its own: the savepoint undid it, the rest of the pass goes on, and the next
                    # pass tries this row again.
                    log.exception("sweep of %s deferred", row.request_id)
                    continue
                stats.finalized += 1
                readable = not q and refusal is None
                finished.append((row.request_id, result.outcome, readable))
                if refusal is not None:
                    stats.dead += 1
                    original = {"request_id": row.request_id, "kind": "sweep"}
                    dead.append(dead_letter_fields("sweep", refusal, original, now_ms))
        pipe = self.client.pipeline(transaction=False)
        write_dead_letters(pipe, self.keys, dead, self.settings.dead_letter_maxlen)
        recheck_at = time.time() + self.policy.recheck_seconds
        for request_id, outcome, readable in finished:
            pipe.srem(self.keys.quarantine, request_id)
            if not readable:
                continue  # a refused stream is never read again; it expires with its TTL
            if outcome is Outcome.UNSETTLED:
                pipe.zadd(self.keys.recheck, {request_id: recheck_at})
            else:
                pipe.delete(self.keys.request(request_id))
        pipe.execute()

    def _findings(
        self,
        session: Session,
        result: Result,
        effect: str,
        now: datetime,
        *,
        meta: RequestMeta | None = None,
        closed: bool = True,
    ) -> None:
        record_findings(
            session,
            result,
            effect,
            salt=self.settings.hash_salt,
            now=now,
            non_streamable=self.settings.non_streamable_models,
            meta=meta,
            closed=closed,
        )

    @staticmethod
    def _unreadable(session: Session, request_id: str, why: str, now: datetime) -> None:
        """The anomaly that says why a finalized call is ``unreadable`` (for ``billing show``)."""
        reservation = reservation_of(session, request_id)
        if reservation is not None:
            record_anomalies(session, reservation[0], {AnomalyKind.UNREADABLE: summary(why)}, now)

    def recheck_unsettled(self, stats: SweepStats) -> None:
        """Re-read the streams of unsettled calls that are due, in groups within the byte budget.

        A stream that turns out unusable (past the size limits, which is checked before reading,
        or refused when decoded) is dead-lettered and never read again: no late data can fix it."""
        due = self.client.zrangebyscore(self.keys.recheck, "-inf", time.time(), 0, self.limit)
        if not due:
            return
        ids = [raw.decode() for raw in due]
        sizes = size_streams(self.client, self.keys, ids)
        for group in self._within_budget([size.cost for size in sizes]):
            self._recheck(ids[group], sizes[group], stats)

    def _recheck(self, ids: list[str], sizes: list[StreamSize], stats: SweepStats) -> None:
        book = self.consumer.prices.current()
        fetched = self._read(ids, sizes, [False] * len(ids), book)
        now = datetime.now(UTC)
        now_ms = int(time.time() * 1000)
        grace = self.policy.grace
        done: list[str] = []
        later: list[str] = []
        refused: list[tuple[str, str]] = []
        foreign: list[str] = []
        with self.consumer.sessions() as session, session.begin():
            found = session.execute(
                select(Reservation.request_id, Failure.detected_at, Reservation.request_digest)
                .join(Failure, Failure.reservation_id == Reservation.id)
                .where(Reservation.request_id.in_(ids))
            ).all()
            detected = {row.request_id: row.detected_at for row in found}
            digests = {row.request_id: row.request_digest for row in found}
            for request_id, size, entries in zip(ids, sizes, fetched, strict=True):
                stats.rechecked += 1
                since = detected.get(request_id)
                if size.refusal is not None:
                    refused.append((request_id, size.refusal))
                    continue
                if not entries or since is None:
                    done.append(request_id)
                    continue
                try:
                    with session.begin_nested():
                        meta, result = reconcile_call(entries, request_id, book)
                        if other_call(digests.get(request_id), meta.digest):
                            # Another call's stream under this id: not late data of this call,
                            # and not this call's to delete (the consumer dead-letters that call).
                            foreign.append(request_id)
                            continue
                        if result.outcome is Outcome.SETTLED:
                            effect = apply_result(session, result, now=now, grace=grace)
                            self._findings(session, result, effect, now)
                            if effect is Effect.SETTLED_LATE:
                                stats.settled_late += 1
                            done.append(request_id)
                            continue
                except InputError as exc:
                    refused.append((request_id, str(exc)))
                    continue
                except SQLAlchemyError:
                    log.exception("recheck of %s failed", request_id)
                if now - since >= grace:
                    stats.expired += 1
                    done.append(request_id)
                else:
                    later.append(request_id)
        pipe = self.client.pipeline(transaction=False)
        for request_id in done:
            pipe.delete(self.keys.request(request_id))
            pipe.zrem(self.keys.recheck, request_id)
        for request_id, _reason in refused:
            pipe.zrem(self.keys.recheck, request_id)  # it stays until its TTL, never read again
        for request_id in foreign:
            pipe.zrem(self.keys.recheck, request_id)  # this call has no late data to come
        stats.dead += len(refused)
        write_dead_letters(
            pipe,
            self.keys,
            [
                dead_letter_fields(
                    "recheck", reason, {"request_id": rid, "kind": "recheck"}, now_ms
                )
                for rid, reason in refused
            ],
            self.settings.dead_letter_maxlen,
        )
        if later:
            pipe.zadd(
                self.keys.recheck,
                dict.fromkeys(later, time.time() + self.policy.recheck_seconds),
            )
        pipe.execute()

    def apply_policy(self, stats: SweepStats) -> None:
        policy = self.policy.resolve
        if policy == "none":
            return
        with self.consumer.sessions() as session, session.begin():
            stats.resolved += resolve_expired(
                session, now=datetime.now(UTC), grace=self.policy.grace, policy=policy
            )
