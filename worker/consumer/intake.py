"""Step 1 of a batch (``read``): take notification entries from a partition's consumer group.

Contract: ``read`` first claims entries another consumer left pending longer than ``claim_idle_ms``
(it died), then reads new ones, up to ``count`` in all; ``keep`` re-claims entries this consumer
left past a batch's byte budget. Nothing is acknowledged here (``acknowledge`` does it, after the
commit). As a step, ``Intake`` fills a ``Reading`` with its entries: ``rest`` kept when there
is one, else new entries read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from worker.consumer.steps import Step
from worker.contract.keys import Keys

EntryList = list[tuple[bytes, Any]]


@dataclass
class Reading:
    """What the ``read`` step is asked for, and the entries it took."""

    stream: str
    count: int
    block_ms: int | None
    rest: EntryList = field(default_factory=list)  # entries a batch left past its budget
    entries: EntryList = field(default_factory=list)


class Intake(Step[Reading]):
    name = "read"

    def process(self, reading: Reading) -> None:
        if reading.rest:
            reading.entries = self.keep(reading.stream, reading.rest)
        else:
            reading.entries = self.read(reading.stream, reading.count, reading.block_ms)

    def __init__(self, client: redis.Redis, keys: Keys, name: str, claim_idle_ms: int) -> None:
        self.client = client
        self.keys = keys
        self.consumer_name = name  # in the consumer group
        self.claim_idle_ms = claim_idle_ms
        self._groups_ready: set[str] = set()

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

    def read(self, stream: str, count: int, block_ms: int | None) -> EntryList:
        self.ensure_group(stream)
        _, claimed, *_ = self.client.xautoclaim(
            stream, self.keys.group, self.consumer_name, self.claim_idle_ms, "0-0", count=count
        )
        entries = list(claimed)
        if len(entries) < count:
            reply = self.client.xreadgroup(
                self.keys.group,
                self.consumer_name,
                {stream: ">"},
                count=count - len(entries),
                block=None if entries or block_ms is None else block_ms,
            )
            for _stream, new in reply or ():
                entries.extend(new)
        return entries

    def keep(self, stream: str, rest: EntryList) -> EntryList:
        """Entries left past a batch's budget, still pending here: reset their idle time, so no
        other consumer claims them while this one works through the batches before them, and drop
        any another consumer has claimed and acknowledged meanwhile."""
        ids = [entry_id for entry_id, _fields in rest]
        kept = set(
            self.client.xclaim(stream, self.keys.group, self.consumer_name, 0, ids, justid=True)
        )
        return [entry for entry in rest if entry[0] in kept]
