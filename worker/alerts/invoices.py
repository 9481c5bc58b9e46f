"""The ``invoice_finalized`` webhook event: one outbox row per invoice or credit note finalized,
queued in the transaction that finalizes it (``invoice_store.issue``'s ``on_finalized``), so the
event is sent if and only if the document exists, once (its dedupe key is the document's number).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from models import AlertKind
from worker.alerts.aggregation import Alert
from worker.alerts.outbox import enqueue
from worker.reports.invoice_model import usd
from worker.reports.invoice_store import Stored
from worker.reports.statement_query import parse_month


def queue_finalized(session: Session, stored: Stored) -> None:
    start, end = parse_month(stored.month)
    what = "invoice" if stored.kind == "invoice" else "credit note"
    alert = Alert(
        kind=str(AlertKind.INVOICE_FINALIZED),
        account_id=stored.account_id,
        model=None,
        reason=stored.kind,
        window_start=start,
        window_end=end,
        text=f"{what} {stored.number} finalized for {stored.account_id}, {stored.month}: "
        f"total {usd(stored.total)} USD",
        fields={
            "number": stored.number,
            "document_kind": stored.kind,
            "month": stored.month,
            "total_micros": stored.total,
            "issued_at": stored.issued_at.isoformat(),
            "due_at": None if stored.due_at is None else stored.due_at.isoformat(),
        },
        subject=stored.number,
    )
    enqueue(session, [alert], stored.issued_at)
