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
* Streams are sized before they are read and read in groups within the byte budget. A group goes
  through the consumer's own steps ``fetch`` and ``reconcile`` (``consumer.steps``: wrapped or
  replaced there, they read and reconcile for both), then the sweeper's transaction and its
  after-commit step (``worker.consumer.sweeping``). A stream refused (past the limits, undecodable,
  or quarantined by the consumer) is dead-lettered once and never read again: its call is
  finalized or left to the resolve policy from the reservation alone.

What the sweeper does differently from the consumer is its ``SweepPolicy``: which calls it picks
(held reservations idle for ``idle_ms``, at most ``limit`` a pass over ``max_pages`` pages), when an
unsettled call is read again (``recheck_seconds``), the grace period and the resolve policy; and
its transaction, which leaves a failing row to the next pass where the consumer reruns a batch.

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

from models.reservations import Reservation, Status
from worker.consumer import partitions
from worker.consumer.calls import CallState
from worker.consumer.consumer import Consumer
from worker.consumer.reading import size_streams, within_budget
from worker.consumer.steps import Call, Chain, Steps
from worker.consumer.sweeping import (
    Finalize,
    FinalizeAfter,
    Recheck,
    RecheckAfter,
    Sweep,
    SweepStats,
    entry_ms,
    quiet,
)
from worker.ledger.operations import resolve_expired

__all__ = ["SweepPolicy", "SweepStats", "Sweeper"]

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


def _stream_id(value: bytes | str) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else value
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


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
    """A sweep pass (``run``) over the steps ``steps``: the ``read`` chain (the consumer's
    ``fetch`` and ``reconcile``, its own ``quiet`` between them), then ``finalize`` or ``recheck``
    (``worker.consumer.sweeping``). ``wrap_step`` / ``replace_step`` reach them by name as the
    consumer's do; the consumer's own ``fetch`` and ``reconcile``, wrapped or replaced there, are
    the ones a sweep runs."""

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
        settings, policy = self.settings, self.policy
        applied = {
            "hash_salt": settings.hash_salt,
            "non_streamable": settings.non_streamable_models,
            "grace": policy.grace,
        }
        after = {
            "recheck_seconds": policy.recheck_seconds,
            "maxlen": settings.dead_letter_maxlen,
        }
        self.steps = Steps(
            [
                Chain(
                    "read",
                    [
                        Call("fetch", lambda sweep: consumer.steps["fetch"].process(sweep)),
                        Call("quiet", quiet),
                        Call("reconcile", lambda sweep: consumer.steps["reconcile"].process(sweep)),
                    ],
                ),
                Chain(
                    "finalize",
                    [
                        Finalize(consumer.sessions, **applied),
                        FinalizeAfter(self.client, self.keys, **after),
                    ],
                ),
                Chain(
                    "recheck",
                    [
                        Recheck(consumer.sessions, **applied),
                        RecheckAfter(self.client, self.keys, **after),
                    ],
                ),
            ]
        )

    def wrap_step(self, name: str, around: Any) -> Any:
        """``around(work, sweep)`` in place of the step ``name``'s work (``Steps.wrap``)."""
        return self.steps.wrap(name, around)

    def replace_step(self, name: str, step: Any) -> Any:
        """``step`` in the place of the step ``name`` (``Steps.replace``); the one it replaced."""
        return self.steps.replace(name, step)

    def _through(self, sweep: Sweep) -> None:
        """``sweep`` read, then decided by the chain its kind names, which commits last."""
        self.steps["read"].submit(sweep)
        self.steps[sweep.kind].submit(sweep)

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
                quiet = not last or now_ms - entry_ms(last) >= self.policy.idle_ms
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
        book = self.consumer.prices.current()
        for group in self._within_budget(costs):
            calls = [
                CallState(row.request_id, whole=True, dead_reason="unread" if q else size.refusal)
                for row, q, size in zip(rows[group], quarantined[group], sizes[group], strict=True)
            ]
            sweep = Sweep.of(
                "finalize",
                book,
                calls,
                sizes=sizes[group],
                sweep=stats,
                now=now,
                rows=rows[group],
                quarantined=quarantined[group],
                idle_ms=self.policy.idle_ms,
            )
            self._through(sweep)

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
            calls = [
                CallState(rid, whole=True, dead_reason=size.refusal)
                for rid, size in zip(ids[group], sizes[group], strict=True)
            ]
            book = self.consumer.prices.current()
            self._through(Sweep.of("recheck", book, calls, sizes=sizes[group], sweep=stats))

    def apply_policy(self, stats: SweepStats) -> None:
        policy = self.policy.resolve
        if policy == "none":
            return
        with self.consumer.sessions() as session, session.begin():
            stats.resolved += resolve_expired(
                session, now=datetime.now(UTC), grace=self.policy.grace, policy=policy
            )
