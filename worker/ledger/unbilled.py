"""A request the gateway served unbilled (``BILLING_UNBILLED_ROUTES=pass``), as the ledger keeps it.

Each ``unbilled`` notification (docs/events.md §2) becomes a call of its own: a reservation of 0
micros under the gateway's request id, for the account the gateway's authentication named (else
``UNATTRIBUTED``), model ``UNBILLED_MODEL``, voided at once (nothing was charged, nothing is
held), with the anomaly ``unbilled_route`` naming the route; the anomaly alerts like every other.
So ``billing show <id>`` answers for it, and the reports count it. Idempotent: a redelivered
notification finds the voided call and changes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import AnomalyKind, Reservation
from worker.core.errors import InputError, LedgerError
from worker.core.money import Micros
from worker.core.request import EARLIEST_CREATED_AT, LATEST_CREATED_AT, RequestMeta
from worker.core.result import Estimate, Outcome, Result
from worker.ledger.findings import record_anomalies
from worker.ledger.operations import void

UNBILLED_MODEL = "unbilled"
UNATTRIBUTED = "unattributed"
EARLIEST_MS = int(EARLIEST_CREATED_AT.timestamp() * 1000)
LATEST_MS = int(LATEST_CREATED_AT.timestamp() * 1000)


def _void_result(meta: RequestMeta) -> Result:
    return Result(
        request_id=meta.request_id,
        account_id=meta.account_id,
        model=meta.model,
        stream=meta.stream,
        created_at=meta.created_at,
        reserved_micros=Micros(0),
        outcome=Outcome.VOID,
        reason=None,
        usage_source=None,
        usage=None,
        usage_raw=None,
        estimate=Estimate(prompt_tokens=0, completion_tokens=0, approximate=True),
        charge_micros=None,
        exposure_micros=Micros(0),
        choices=(),
        completion_id=None,
        system_fingerprint=None,
        anomalies=(),
    )


def record_unbilled(
    session: Session,
    request_id: str,
    route: str,
    account_id: str | None,
    ts_ms: int | None,
    now: datetime,
) -> None:
    """Record one unbilled request (see the module docstring). Raises ``InputError`` when its
    request id is a billed call's: the notification must not touch another call."""
    found = session.execute(
        select(Reservation.id, Reservation.model).where(Reservation.request_id == request_id)
    ).first()
    if found is not None and found.model != UNBILLED_MODEL:
        raise InputError(f"unbilled notification for {request_id}, a billed call's id")
    created_at = now
    if ts_ms is not None and EARLIEST_MS <= ts_ms < LATEST_MS:  # else the gateway's clock is off
        created_at = datetime.fromtimestamp(ts_ms / 1000, UTC)
    meta = RequestMeta(
        request_id=request_id,
        account_id=account_id or UNATTRIBUTED,
        model=UNBILLED_MODEL,
        stream=False,
        include_usage=True,
        reserved_micros=Micros(0),
        created_at=created_at,
    )
    void(session, _void_result(meta), now=now)
    reservation = session.scalar(select(Reservation.id).where(Reservation.request_id == request_id))
    if reservation is None:
        raise LedgerError(f"{request_id}: the unbilled call just recorded cannot be read back")
    detail = f"served unbilled: {route} (BILLING_UNBILLED_ROUTES=pass)"
    record_anomalies(session, reservation, {AnomalyKind.UNBILLED_ROUTE: detail}, now)
