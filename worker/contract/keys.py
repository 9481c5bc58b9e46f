"""Redis key names of the gateway contract (docs/events.md), in one place.

Every key starts with the configurable prefix. No operation touches two keys atomically, so the names
need no hash tags to work on Redis Cluster; each multi-key *pipeline* is split per slot by the client.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

# Notification streams of every partition count up to this one are found again by name after the
# count changed (``worker.consumer.partitions``); the settings refuse a larger count.
from worker.config import MAX_PARTITIONS

__all__ = ["MAX_PARTITIONS", "Keys"]


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = "billing"
    partitions: int = 1

    def request(self, request_id: str) -> str:
        """The per-call stream: a ``request`` entry, then ``frame`` entries or one ``response``."""
        return f"{self.prefix}:req:{request_id}"

    def partition(self, request_id: str) -> int:
        return zlib.crc32(request_id.encode()) % self.partitions if self.partitions > 1 else 0

    def events(self, partition: int = 0) -> str:
        """A notification stream (``open`` / ``close``); partitioned when ``partitions > 1``."""
        return (
            f"{self.prefix}:events" if self.partitions == 1 else f"{self.prefix}:events:{partition}"
        )

    def events_for(self, request_id: str) -> str:
        return self.events(self.partition(request_id))

    def all_events(self) -> list[str]:
        """The notification streams of the configured partition count."""
        return [self.events(p) for p in range(self.partitions)]

    def possible_events(self) -> list[str]:
        """Every name a notification stream has under some partition count up to
        ``MAX_PARTITIONS`` (or this one): ``<prefix>:events`` and ``<prefix>:events:<p>``."""
        count = max(self.partitions, MAX_PARTITIONS)
        return [f"{self.prefix}:events", *(f"{self.prefix}:events:{p}" for p in range(count))]

    @property
    def dead(self) -> str:
        """Dead letters: input that could not be used, with the reason and the original fields."""
        return f"{self.prefix}:dead"

    @property
    def recheck(self) -> str:
        """Sorted set of unsettled calls whose streams are kept for late data, scored by next check."""
        return f"{self.prefix}:recheck"

    @property
    def quarantine(self) -> str:
        """Set of request ids whose streams were dead-lettered; the sweeper leaves them alone."""
        return f"{self.prefix}:quarantine"

    @property
    def group(self) -> str:
        """The consumer group every worker process joins on each notification stream."""
        return f"{self.prefix}-workers"
