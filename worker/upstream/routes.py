"""Where the gateway sent each call: ``call_routes`` (provider, upstream key label) per request id.

Written by the consumer in the transaction that holds or settles the call, from the request
metadata it already read: one ``INSERT ... ON CONFLICT DO NOTHING`` per batch (``worker.db.bulk``:
one statement text whatever the batch's size), only for calls whose metadata names a provider or an
upstream key (a gateway that sends neither costs nothing). The first
route recorded for a request id stays: a redelivery writes the same row again, and a reused request
id is refused by the ledger before its route matters. Kept apart from the reservation so the
ledger's posting paths do not change; the reconciliation joins it by request id.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from models import CallRoute
from worker.core.request import RequestMeta
from worker.db import bulk


def record_routes(session: Session, metas: Iterable[RequestMeta]) -> int:
    """Record the routes of ``metas`` not recorded yet; returns how many rows were offered."""
    rows = {
        meta.request_id: {
            "request_id": meta.request_id,
            "provider": meta.provider,
            "upstream_key": meta.upstream_key,
        }
        for meta in metas
        if meta.provider is not None or meta.upstream_key is not None
    }
    bulk.insert(session, CallRoute.__table__, list(rows.values()), conflict=())
    return len(rows)
