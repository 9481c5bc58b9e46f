"""The ``unbilled`` notifications of a batch (docs/events.md §2): requests the gateway served
without billing them (``BILLING_UNBILLED_ROUTES=pass``).

``take_unbilled`` (in ``gather``) parses one into ``batch.unbilled`` (a malformed one is a dead
letter) and marks it for acknowledgement, which, as for every entry, happens only after the
batch's commit. ``record_batch_unbilled`` (the transaction's ``unbilled`` part) records each as
its own voided call with the anomaly ``unbilled_route`` (``worker.ledger.unbilled``), each inside
a savepoint: one the ledger refuses becomes a dead letter, the rest are kept.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from worker.contract.entries import dead_letter_fields, parse_unbilled
from worker.core.errors import InputError, LedgerError
from worker.ledger.unbilled import record_unbilled

if TYPE_CHECKING:
    from worker.consumer.applying import Attempt
    from worker.consumer.calls import Batch

log = logging.getLogger("worker.consumer.consumer")


def take_unbilled(batch: Batch, entry_id: bytes, fields: dict[bytes, Any], now_ms: int) -> None:
    try:
        batch.unbilled.append(parse_unbilled(entry_id, fields))
    except InputError as exc:
        batch.dead.append(dead_letter_fields("notification", str(exc), fields, now_ms, entry_id))
    batch.ack.append(entry_id)


def record_batch_unbilled(attempt: Attempt) -> None:
    session, batch, now = attempt.session, attempt.batch, attempt.now
    for note in batch.unbilled:
        try:
            with session.begin_nested():
                record_unbilled(session, note.request_id, note.route, note.account_id, note.ts, now)
        except (InputError, LedgerError) as exc:
            # Anything else (a transient error) rolls the batch back: ``Applier`` runs it again.
            fields = {b"kind": b"unbilled", b"request_id": note.request_id.encode()}
            stamp = int(now.timestamp() * 1000)
            letter = dead_letter_fields("notification", str(exc), fields, stamp, note.entry_id)
            if not any(d.get("entry_id") == letter["entry_id"] for d in batch.dead):
                batch.dead.append(letter)  # once, whatever the attempt
    if batch.unbilled:
        log.warning("%d requests served unbilled recorded", len(batch.unbilled))
