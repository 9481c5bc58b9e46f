"""How far the workers are behind: consumer-group lag and pending entries per notification stream.

Read-only, a few single-key commands per stream (``XINFO GROUPS``, ``XPENDING``, ``XLEN``), so it is
cheap enough for every metrics scrape and works on Redis Cluster. Used by ``billing doctor`` and by the
metrics exporter.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import redis

from worker.consumer import partitions
from worker.contract.keys import Keys

log = logging.getLogger("worker.consumer")


@dataclass(frozen=True, slots=True)
class StreamBacklog:
    stream: str
    length: int
    group: bool
    """Whether the consumer group exists (it does once any worker has read the stream)."""
    lag: int | None
    """Entries not yet delivered to any consumer; ``None`` when Redis cannot tell (before 7.0, or
    after entries were deleted from the middle of the stream)."""
    pending: int
    """Entries delivered and not yet acknowledged (being processed, deferred, or held by a dead
    consumer until ``BILLING_CLAIM_IDLE_MS`` passes)."""
    oldest_pending_age_ms: int | None
    """Age of the oldest unacknowledged entry, by its id (the time the gateway wrote it)."""
    oldest_pending_idle_ms: int | None
    """Time since that entry was last delivered (or claimed); grows when no live worker claims it."""
    oldest_pending_deliveries: int | None
    """How often that entry was delivered; grows when every attempt is deferred."""
    consumers: int

    @property
    def waiting(self) -> bool:
        """Whether a drain has anything to do here: entries not yet delivered (or, when Redis
        cannot tell the lag, any entries at all), or entries pending."""
        undelivered = self.length > 0 if self.lag is None else self.lag > 0
        return undelivered or self.pending > 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _group_info(client: Any, stream: str, group: str) -> dict[str, Any] | None:
    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError as exc:  # "no such key": nothing was ever written
        if "no such key" in str(exc).lower():
            return None
        raise
    for info in groups:
        if _text(info.get("name")) == group:
            return info
    return None


def stream_backlog(client: Any, stream: str, group: str) -> StreamBacklog:
    length = int(client.xlen(stream))
    info = _group_info(client, stream, group)
    if info is None:
        # No group yet: every entry in the stream is waiting for the first worker.
        return StreamBacklog(stream, length, False, length, 0, None, None, None, 0)
    lag = info.get("lag")
    pending = int(info.get("pending") or 0)
    age = idle = deliveries = None
    if pending:
        oldest = client.xpending_range(stream, group, min="-", max="+", count=1)
        if oldest:
            entry = oldest[0]
            entry_ms = int(_text(entry["message_id"]).split("-", 1)[0])
            age = max(0, int(time.time() * 1000) - entry_ms)
            idle = int(entry["time_since_delivered"])
            deliveries = int(entry["times_delivered"])
    return StreamBacklog(
        stream=stream,
        length=length,
        group=True,
        lag=None if lag is None else int(lag),
        pending=pending,
        oldest_pending_age_ms=age,
        oldest_pending_idle_ms=idle,
        oldest_pending_deliveries=deliveries,
        consumers=int(info.get("consumers") or 0),
    )


def live_consumers(client: Any, stream: str, group: str, within_ms: int) -> tuple[int, int]:
    """(consumers of ``group`` that read ``stream`` within the last ``within_ms``, the others):
    Redis keeps a consumer in its group until it is deleted, so a worker killed long ago still
    counts in ``XINFO GROUPS``; its ``idle`` (the time since it last read) tells it apart."""
    try:
        found = client.xinfo_consumers(stream, group)
    except redis.ResponseError:  # the group or the stream went away meanwhile
        return 0, 0
    live = sum(1 for consumer in found if int(consumer.get("idle") or 0) <= within_ms)
    return live, len(found) - live


def read_backlog(client: Any, keys: Keys) -> list[StreamBacklog]:
    """The backlog of every notification stream: the configured partitions in order, then the
    retired streams still there (``partitions``)."""
    return [
        stream_backlog(client, stream, keys.group) for stream in partitions.streams(client, keys)
    ]


def dead_letters_added(client: Any, keys: Keys) -> int:
    """Entries ever added to the dead-letter stream (Redis 7's ``entries-added``): it keeps rising
    where the stream's length stops at its cap (``BILLING_DEAD_LETTER_MAXLEN``) or is trimmed."""
    try:
        info = client.xinfo_stream(keys.dead)
    except redis.ResponseError:  # no dead letter yet: the stream does not exist
        return 0
    return int(info.get("entries-added", info.get(b"entries-added", 0)) or 0)


def dead_letter_count(client: Any, keys: Keys) -> int:
    """Entries in the dead-letter stream (they stay until someone trims it)."""
    return int(client.xlen(keys.dead))


def recheck_count(client: Any, keys: Keys) -> int:
    """Unsettled calls whose streams are kept for late data."""
    return int(client.zcard(keys.recheck))


def to_drain(client: Any, keys: Keys) -> list[str]:
    """One look at the retired streams: those with work waiting, to be drained (each adopted into
    the consumer group first when it has none); each of the others deleted if it is drained and
    quiet (``partitions.retire``). What ``billing.drain_retired`` runs; it sends a drain for each named."""
    due = []
    for stream in partitions.retired(client, keys):
        found = stream_backlog(client, stream, keys.group)
        if found.waiting:
            if not found.group:
                partitions.adopt(client, keys, stream)
            due.append(stream)
        elif partitions.retire(client, stream):
            log.info("%s: drained and quiet, deleted", stream)
    return due
