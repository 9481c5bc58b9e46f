"""Request ids for tests that count a gateway's notification streams: random, except that the
first ones land one on each partition, so every stream the partition count names is written
(random ids alone leave one of 4 streams empty after 20 calls in 4 x (3/4)^20 of runs, about 1 in
80)."""

from __future__ import annotations

import uuid

from worker.contract.keys import Keys


def ids_on_every_partition(keys: Keys, count: int) -> list[str]:
    """``count`` request ids (``req-`` and 12 hex digits); the first ``keys.partitions`` of them
    on partitions 0, 1, … in turn."""
    ids: list[str] = []
    while len(ids) < count:
        rid = f"req-{uuid.uuid4().hex[:12]}"
        if len(ids) >= keys.partitions or keys.partition(rid) == len(ids):
            ids.append(rid)
    return ids
