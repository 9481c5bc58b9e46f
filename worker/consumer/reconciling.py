"""Step 4 of a batch (``reconcile``): decode every call's stream and reconcile it into a ``Result``.

Contract: pure work, no IO. A call whose stream is unusable (``InputError``) becomes a dead letter
before the database is touched; a bug on one call's input defers that call, not the batch.
``reconcile_call`` / ``reconcile_record`` are the one way a stream becomes a result; the sweeper
runs this very step on its calls (``worker.consumer.sweeping``). ``Reconcile(per_call=…)`` runs another function per call in their place
(a benchmark's timing, a test's failure), given and returning what ``reconcile_call`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from worker.consumer.calls import Batch, CallState
from worker.consumer.steps import Step
from worker.contract.entries import Entry, decode_call, read_meta
from worker.core.errors import InputError
from worker.core.prices import PriceBook
from worker.core.reconcile import reconcile_response, reconcile_stream
from worker.core.request import RequestMeta
from worker.core.result import Result

log = logging.getLogger("worker.consumer.consumer")


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
    if record.response_status is None:
        raise InputError("a non-streamed call without its response status")
    return record.meta, reconcile_response(
        record.meta, record.response_status, record.response_body or b"", book
    )


ReconcileCall = Callable[[list[Entry], str, PriceBook], tuple[RequestMeta, Result]]


class Reconcile(Step[Batch]):
    """Every call of the batch reconciled (``reconcile_all``); then each stream is cut to its first
    entry: the transaction only asks whether the stream exists, so the rest is let go now."""

    name = "reconcile"

    def __init__(self, per_call: ReconcileCall = reconcile_call) -> None:
        self.per_call = per_call

    def process(self, batch: Batch) -> None:
        reconcile_all(batch.calls, batch.streams, batch.book, self.per_call)
        batch.streams = [call_entries[:1] for call_entries in batch.streams]


def reconcile_all(
    calls: list[CallState],
    streams: list[list[Entry]],
    book: PriceBook,
    reconcile: ReconcileCall = reconcile_call,
) -> None:
    """Decode each call's stream: a close (or a sweep's ``whole`` call) is reconciled, an open
    only needs its metadata."""
    for call, entries in zip(calls, streams, strict=True):
        if not entries:
            continue  # what a missing stream means depends on the ledger: see ``applying``
        if call.dead_reason is not None:
            continue  # refused unread (past the limits): only its head was read, to salvage
        try:
            if call.closing or call.whole:
                call.meta, call.result = reconcile(entries, call.request_id, book)
            else:
                call.meta = read_meta(entries, call.request_id)
        except InputError as exc:
            call.dead_reason = str(exc)
        except Exception as exc:  # a bug on one call's input: defer it like a database error
            log.exception("call %s deferred", call.request_id)
            call.defer(exc)
