"""Step 3 of a batch: decode every call's stream and reconcile it into a ``Result``.

Contract: pure work, no IO. A call whose stream is unusable (``InputError``) becomes a dead letter
before the database is touched; a bug on one call's input defers that call, not the batch.
``reconcile_call`` / ``reconcile_record`` are the one way a stream becomes a result (the sweeper
uses them too).
"""

from __future__ import annotations

import logging

from worker.consumer.calls import CallState
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


def reconcile_all(calls: list[CallState], streams: list[list[Entry]], book: PriceBook) -> None:
    """Decode each call's stream: a close is reconciled, an open only needs its metadata."""
    for call, entries in zip(calls, streams, strict=True):
        if not entries:
            continue  # what a missing stream means depends on the ledger: see ``applying``
        try:
            if call.closing:
                call.meta, call.result = reconcile_call(entries, call.request_id, book)
            else:
                call.meta = read_meta(entries, call.request_id)
        except InputError as exc:
            call.dead_reason = str(exc)
        except Exception as exc:  # a bug on one call's input: defer it like a database error
            log.exception("call %s deferred", call.request_id)
            call.defer(exc)
