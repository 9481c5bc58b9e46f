"""Steps 2 and 3 of a batch: ``gather`` the notification entries by call, ``fetch`` their streams.

Contract of ``Gather`` and ``Fetch``: Redis reads only, nothing written anywhere (safe to run while another batch
is applied). A notification that does not parse is a dead letter at once; every call's stream is
sized first, and a stream past the size limits is refused unread; the calls past the batch's byte
budget are left for the next batch (``Batch.rest``, still pending). Calls come out in request-id
order, the order the transaction locks their reservations in. ``Fetch`` reads each stream as far
as ``gather`` sized it, for the consumer's batches and the sweeper's alike.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from worker.consumer.calls import Batch, CallState
from worker.consumer.reading import (
    StreamSize,
    read_admissions,
    read_streams,
    size_streams,
    within_budget,
)
from worker.consumer.steps import Step
from worker.consumer.unbilled import take_unbilled
from worker.contract.entries import Entry, dead_letter_fields, is_unbilled, parse_notification
from worker.contract.keys import Keys
from worker.core.errors import InputError

# The entries at a stream's head: the gateway's admission record and the request entry.
HEAD_ENTRIES = 2


def group(batch: Batch, entries: list[tuple[bytes, Any]]) -> list[CallState]:
    """The entries' calls in request-id order; unusable notifications go to ``batch.dead``."""
    now_ms = int(time.time() * 1000)
    calls: dict[str, CallState] = {}
    for entry_id, fields in entries:
        if fields is None:  # deleted from the stream while pending
            batch.ack.append(entry_id)
            continue
        if is_unbilled(fields):
            take_unbilled(batch, entry_id, fields, now_ms)
            continue
        try:
            note = parse_notification(entry_id, fields)
        except InputError as exc:
            batch.dead.append(
                dead_letter_fields("notification", str(exc), fields, now_ms, entry_id)
            )
            batch.ack.append(entry_id)
            continue
        call = calls.setdefault(note.request_id, CallState(note.request_id))
        call.notes.append(note)
        if note.kind == "close" and note.ts is not None:
            call.close_ts = note.ts
    # Request-id order, so that two consumers whose batches share calls (an open read by one, its
    # close by the other) take their reservation locks in the same order: in arrival order, each
    # batch-long transaction waited for the other's and PostgreSQL broke the cycle with a deadlock.
    return sorted(calls.values(), key=lambda call: call.request_id)


def fetch(
    client: redis.Redis, keys: Keys, calls: list[CallState], sizes: list[StreamSize]
) -> list[list[Entry]]:
    """Each call's stream as far as it was sized: whole for a close (or a call marked ``whole``),
    its head for an open (``HEAD_ENTRIES``: the admission and request entries); for a call refused
    unread (past the limits), its admission entry alone, to be recorded from
    (``read_admissions``); nothing for a missing stream."""
    reads = []
    for call, size in zip(calls, sizes, strict=True):
        count = 0 if call.dead_reason is not None else size.entries
        whole = call.closing or call.whole
        reads.append((call.request_id, count if whole else min(count, HEAD_ENTRIES)))
    streams = read_streams(client, keys, reads)
    refused = [index for index, call in enumerate(calls) if call.dead_reason is not None]
    heads = read_admissions(client, keys, [calls[index].request_id for index in refused])
    for index, head in zip(refused, heads, strict=True):
        streams[index] = head
    return streams


class Gather(Step[Batch]):
    """The batch's calls within ``batch_bytes`` (``calls``, ``sizes``); the rest left pending."""

    name = "gather"

    def __init__(self, client: redis.Redis, keys: Keys, batch_bytes: int) -> None:
        self.client = client
        self.keys = keys
        self.batch_bytes = batch_bytes

    def process(self, batch: Batch) -> None:
        entries = batch.entries
        ordered = group(batch, entries)
        sizes = size_streams(self.client, self.keys, [call.request_id for call in ordered])
        for call, size in zip(ordered, sizes, strict=True):
            call.dead_reason = size.refusal
        taken = within_budget([size.cost for size in sizes], self.batch_bytes)
        later = {note.entry_id for call in ordered[taken:] for note in call.notes}
        batch.rest = [entry for entry in entries if entry[0] in later]
        batch.stats.read = len(entries) - len(batch.rest)
        batch.calls = ordered[:taken]
        batch.sizes = sizes[:taken]


class Fetch(Step[Batch]):
    """Each call's stream as ``gather`` sized it (``batch.streams``), in one round trip."""

    name = "fetch"

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def process(self, batch: Batch) -> None:
        batch.streams = fetch(self.client, self.keys, batch.calls, batch.sizes)
