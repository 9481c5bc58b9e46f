"""Support answers: everything the ledger knows about one request, and the open failures.

Read-only; returns plain JSON-ready dicts (money as integer micros; the CLI adds USD).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import (
    Account,
    Anomaly,
    Entry,
    Failure,
    LedgerAccount,
    LedgerKind,
    Reservation,
    Status,
    Transaction,
    UsageRecord,
)
from worker.core.errors import LedgerError
from worker.core.request import cut_to_column

reservations = Reservation.__table__
transactions = Transaction.__table__
entries = Entry.__table__
ledger_accounts = LedgerAccount.__table__
usage_records = UsageRecord.__table__
failures = Failure.__table__
anomalies = Anomaly.__table__

OUTCOME_OF_STATUS = {
    Status.HELD: None,
    Status.SETTLED: "settled",
    Status.VOIDED: "void",
    Status.UNSETTLED: "unsettled",
    Status.RELEASED: "unsettled",
    Status.SETTLED_FROM_ESTIMATE: "unsettled",
}


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _failure(row: Any) -> dict[str, Any]:
    resolution = None
    if row.resolved_at is not None:
        resolution = {
            "action": row.action,
            "resolved_by": row.resolved_by,
            "resolved_at": _iso(row.resolved_at),
            "note": row.note,
        }
    return {
        "reason": row.reason,
        "detected_at": _iso(row.detected_at),
        "exposure_micros": row.exposure_micros,
        "estimate": {
            "prompt_tokens": row.estimate_prompt_tokens,
            "completion_tokens": row.estimate_completion_tokens,
        },
        "finish_reasons": row.finish_reasons,
        "resolution": resolution,
    }


def requests_of_completion(session: Session, completion_id: str) -> list[str]:
    """The request ids whose recorded usage came with ``completion_id`` (the ``id`` of the
    provider's answer, what a client sees; a long one as stored, ``cut_to_column``), oldest first;
    usually one."""
    return list(
        session.execute(
            select(reservations.c.request_id)
            .select_from(usage_records.join(reservations))
            .where(usage_records.c.completion_id == cut_to_column(completion_id))
            .order_by(reservations.c.created_at, reservations.c.id)
        ).scalars()
    )


def requests_of_client_reference(session: Session, client_request_id: str) -> list[str]:
    """The request ids of the calls whose client sent ``client_request_id`` as its own reference
    (its ``X-Request-Id``), oldest first: a client may reuse one, and each call is its own."""
    return list(
        session.execute(
            select(reservations.c.request_id)
            .where(reservations.c.client_request_id == client_request_id)
            .order_by(reservations.c.created_at, reservations.c.id)
        ).scalars()
    )


def show(session: Session, request_id: str) -> dict[str, Any] | None:
    """The support answer for one request, or None when the ledger has never seen it."""
    res = session.execute(
        select(reservations).where(reservations.c.request_id == request_id)
    ).first()
    if res is None:
        return None
    usage = session.execute(
        select(usage_records).where(usage_records.c.reservation_id == res.id)
    ).first()
    failure = session.execute(select(failures).where(failures.c.reservation_id == res.id)).first()
    # The contract anomalies recorded for the call, with their detail: for an unsettled
    # implausible_usage or inconsistent_usage call, the usage block's problem.
    findings = session.execute(
        select(anomalies.c.kind, anomalies.c.detail)
        .where(anomalies.c.reservation_id == res.id)
        .order_by(anomalies.c.kind)
    ).all()
    ledger = session.execute(
        select(
            transactions.c.id,
            transactions.c.kind,
            transactions.c.flagged,
            transactions.c.created_at,
            ledger_accounts.c.name,
            ledger_accounts.c.kind.label("account_kind"),
            entries.c.direction,
            entries.c.amount,
        )
        .select_from(entries.join(transactions).join(ledger_accounts))
        .where(transactions.c.reservation_id == res.id)
        .order_by(transactions.c.id, entries.c.id)
    ).all()
    charged = sum(
        (row.amount if row.direction == "credit" else -row.amount)
        for row in ledger
        if row.account_kind == LedgerKind.REVENUE
    )
    status = Status(res.status)
    if usage is not None:
        charge = usage.charge_micros
    elif status is Status.SETTLED_FROM_ESTIMATE and failure is not None:
        charge = failure.exposure_micros
    else:
        charge = None
    estimate = None
    if usage is not None:
        estimate = {
            "prompt_tokens": usage.estimate_prompt_tokens,
            "completion_tokens": usage.estimate_completion_tokens,
            "approximate": usage.estimate_approximate,
        }
        if usage.calibration_version is not None:
            # the billed counts are the raw estimate times these (``worker.core.calibration``)
            estimate["calibration"] = {
                "version": usage.calibration_version,
                "prompt_factor_ppm": usage.prompt_factor_ppm,
                "completion_factor_ppm": usage.completion_factor_ppm,
                "segment": usage.estimate_segment,
            }
    elif failure is not None:
        estimate = {
            "prompt_tokens": failure.estimate_prompt_tokens,
            "completion_tokens": failure.estimate_completion_tokens,
        }
    return {
        "request_id": res.request_id,
        "client_request_id": res.client_request_id,
        "endpoint": res.endpoint or "chat_completions",
        "account_id": res.account_id,
        "model": res.model,
        "stream": res.stream,
        "created_at": _iso(res.created_at),
        "updated_at": _iso(res.updated_at),
        "status": str(status),
        "outcome": OUTCOME_OF_STATUS[status],
        "reason": None if failure is None else failure.reason,
        "usage_source": None if usage is None else usage.usage_source,
        "usage": None
        if usage is None
        else {
            "prompt_tokens": usage.prompt_tokens,
            "cached_tokens": usage.cached_tokens,
            "completion_tokens": usage.completion_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "audio_prompt_tokens": usage.audio_prompt_tokens,
            "audio_completion_tokens": usage.audio_completion_tokens,
            "cache_write_1h_tokens": usage.cache_write_1h_tokens,
            "image_prompt_tokens": usage.image_prompt_tokens,
            "web_search_requests": usage.web_search_requests,
            "search_context_size": usage.search_context_size,
            "citation_tokens": usage.citation_tokens,
            "inference_geo": usage.inference_geo,
            "image_completion_tokens": usage.image_completion_tokens,
            "images": usage.images,
            "image_size": usage.image_size,
            "image_quality": usage.image_quality,
            "provider": usage.provider,
            "usage_shape": usage.usage_shape,
            "service_tier": usage.service_tier,
            "provider_cost_micros": usage.provider_cost_micros,
        },
        "finish_reasons": None if usage is None else usage.finish_reasons,
        "completion_id": None if usage is None else usage.completion_id,
        "system_fingerprint": None if usage is None else usage.system_fingerprint,
        "anomalies": None if usage is None else usage.anomalies,
        "unit_prices": None
        if usage is None or usage.unit_prices is None
        else json.loads(usage.unit_prices),
        "findings": [{"kind": kind, "detail": detail} for kind, detail in findings],
        "estimate": estimate,
        "reserved_micros": res.reserved_micros,
        "charge_micros": charge,
        "charged_micros": charged,
        "entries": [
            {
                "transaction_id": row.id,
                "kind": row.kind,
                "flagged": row.flagged,
                "created_at": _iso(row.created_at),
                "ledger_account": row.name,
                "direction": row.direction,
                "amount_micros": row.amount,
            }
            for row in ledger
        ],
        "failure": None if failure is None else _failure(failure),
    }


def unsettled(
    session: Session,
    *,
    include_resolved: bool = False,
    account: str | None = None,
    reason: str | None = None,
    model: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Failures (open ones unless ``include_resolved``), oldest first; each filter given narrows
    them: the account, the reason and the model exactly, ``detected_at`` in [since, until), at
    most ``limit`` rows (the oldest)."""
    query = (
        select(
            reservations.c.request_id,
            reservations.c.account_id,
            reservations.c.model,
            reservations.c.reserved_micros,
            reservations.c.status,
            failures,
        )
        .select_from(failures.join(reservations, reservations.c.id == failures.c.reservation_id))
        .order_by(failures.c.detected_at, failures.c.id)
    )
    if not include_resolved:
        query = query.where(failures.c.resolved_at.is_(None))
    if account is not None:
        query = query.where(reservations.c.account_id == account)
    if reason is not None:
        query = query.where(failures.c.reason == reason)
    if model is not None:
        query = query.where(reservations.c.model == model)
    if since is not None:
        query = query.where(failures.c.detected_at >= since)
    if until is not None:
        query = query.where(failures.c.detected_at < until)
    if limit is not None:
        query = query.limit(limit)
    return [
        {
            "request_id": row.request_id,
            "account_id": row.account_id,
            "model": row.model,
            "status": row.status,
            "reserved_micros": row.reserved_micros,
            **_failure(row),
        }
        for row in session.execute(query).all()
    ]


def require_known_account(session: Session, account_id: str) -> None:
    """``LedgerError`` for an account the ledger has never seen (no hold, no credit): its balance,
    statement or invoice would be all zeros, which reads as a real, empty account."""
    accounts = Account.__table__
    found = session.execute(select(accounts.c.id).where(accounts.c.id == account_id)).first()
    if found is None:
        raise LedgerError(f"no account {account_id!r}: the ledger has never seen it")
