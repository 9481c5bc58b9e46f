"""Reading call streams without holding more than the limits allow (consumer and sweeper alike).

A call's stream is sized before it is read: ``XLEN`` and ``MEMORY USAGE``, pipelined for a whole
batch in one round trip. A stream past the limits is refused unread (``entries.size_refusal``); the
calls a batch reads are cut where their sizes pass the batch's byte budget (``within_budget``), and
the rest wait for the next batch. A stream is then read up to the entry count it was sized at, so
entries appended in between cannot make the read larger than what was checked.

The budget counts bytes as Redis reports them; reading costs the worker about as much again while
the entries are decoded, and the decoded call (its assembled text) stays until the batch commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from worker.contract.entries import ADMISSION_ENTRY_ID, Entry, size_refusal
from worker.contract.keys import Keys


@dataclass(frozen=True, slots=True)
class StreamSize:
    """A call stream's entry count and its bytes in Redis; both 0 when the stream does not exist."""

    entries: int
    bytes: int

    @property
    def refusal(self) -> str | None:
        """Why the stream must not be read, or None."""
        return size_refusal(self.entries, self.bytes)

    @property
    def cost(self) -> int:
        """What reading it whole counts against a budget: nothing when it is refused unread."""
        return 0 if self.refusal is not None else self.bytes


def _as_sent(response: Any, **_options: Any) -> Any:
    return response


def raw_stream_pipeline(client: redis.Redis) -> Any:
    """A pipeline whose XRANGE replies stay as Redis sends them, ``[id, [name, value, …]]``
    (``entries`` reads both shapes; a cluster pipeline, which parses per node, still gives dicts)."""
    pipe = client.pipeline(transaction=False)
    callbacks = getattr(pipe, "response_callbacks", None)
    if callbacks is not None:
        pipe.response_callbacks = {**callbacks, "XRANGE": _as_sent}
    return pipe


def size_streams(client: redis.Redis, keys: Keys, request_ids: Sequence[str]) -> list[StreamSize]:
    """The size of each call's stream, in one round trip. ``MEMORY USAGE … SAMPLES 0`` walks every
    node of the stream (Redis-side, no data sent): a sampled estimate could miss one huge entry."""
    if not request_ids:
        return []
    pipe = client.pipeline(transaction=False)
    for request_id in request_ids:
        key = keys.request(request_id)
        pipe.xlen(key)
        pipe.memory_usage(key, samples=0)
    replies = pipe.execute()
    return [
        StreamSize(int(replies[2 * i] or 0), int(replies[2 * i + 1] or 0))
        for i in range(len(request_ids))
    ]


def within_budget(costs: Sequence[int], budget: int) -> int:
    """How many of ``costs``, taken in order, fit in ``budget`` bytes: at least one, so a call
    larger than the budget is read alone rather than never."""
    total = 0
    for taken, cost in enumerate(costs):
        total += cost
        if total > budget and taken:
            return taken
    return len(costs)


def read_streams(
    client: redis.Redis, keys: Keys, reads: Sequence[tuple[str, int]]
) -> list[list[Entry]]:
    """For each (request id, count), the first ``count`` entries of the call's stream, raw, in one
    round trip; a count of 0 reads nothing and gives ``[]``."""
    asked = [(request_id, count) for request_id, count in reads if count > 0]
    replies = iter([])
    if asked:
        pipe = raw_stream_pipeline(client)
        for request_id, count in asked:
            pipe.xrange(keys.request(request_id), "-", "+", count=count)
        replies = iter(pipe.execute())
    return [next(replies) if count > 0 else [] for _request_id, count in reads]


def read_admissions(
    client: redis.Redis, keys: Keys, request_ids: Sequence[str]
) -> list[list[Entry]]:
    """For each request id, its stream's admission entry alone (``ADMISSION_ENTRY_ID``, written
    by the gateway's admission script: the money facts, no prompt), raw, in one round trip;
    ``[]`` for a stream without one. A stream refused unread past the limits is still finalized
    from it (``worker.consumer.salvage``)."""
    if not request_ids:
        return []
    pipe = raw_stream_pipeline(client)
    for request_id in request_ids:
        pipe.xrange(keys.request(request_id), ADMISSION_ENTRY_ID, ADMISSION_ENTRY_ID)
    return [list(reply) for reply in pipe.execute()]
