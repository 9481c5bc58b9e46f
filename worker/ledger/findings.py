"""What the worker found about a finished call beyond its money: fingerprint, output hash, drift,
contract anomalies and the alert event of an unsettled call.

Contract: ``record_findings`` runs inside the caller's transaction (the consumer's savepoint per call,
or the sweeper's), right after ``operations.apply_result`` and with the reservation already locked by
it; it never commits and does no IO beyond the database. Every write is idempotent (UNIQUE keys,
``WHERE … IS NULL`` updates), so a redelivered call records nothing twice. Nothing here stores text:
only salted hashes, counts and short details.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.orm import Session

from models import Anomaly, AnomalyKind, Kind, Reservation, Transaction, UsageRecord
from worker.core.anomalies import classify
from worker.core.parity import drift_ppm, fingerprint, output_hash
from worker.core.request import RequestMeta
from worker.core.result import Outcome, Result, UsageSource
from worker.db import bulk
from worker.db.dialect import insert_ignore
from worker.ledger.alert_events import record_unsettled_event, record_unsettled_events
from worker.ledger.batch import Columns
from worker.ledger.effects import NO_CHANGE, SETTLED_EFFECTS, Effect

log = logging.getLogger(__name__)

reservations = Reservation.__table__
usage_records = UsageRecord.__table__
anomalies = Anomaly.__table__
transactions = Transaction.__table__


RESERVATION = select(reservations.c.id, reservations.c.fingerprint).where(
    reservations.c.request_id == bindparam("b_request_id")
)
SET_FINGERPRINT = (
    update(reservations)
    .where(reservations.c.id == bindparam("b_id"), reservations.c.fingerprint.is_(None))
    .values(fingerprint=bindparam("b_fingerprint"))
)
SET_OUTPUT = (
    update(usage_records)
    .where(usage_records.c.reservation_id == bindparam("b_id"))
    .values(output_hash=bindparam("b_output_hash"), drift_ppm=bindparam("b_drift_ppm"))
)


def settled_drift(result: Result) -> int | None:
    """Drift of a settled streamed call with reported usage: reported visible completion tokens
    (reasoning tokens are hidden from the stream, so the estimate cannot see them) against the
    tiktoken estimate of what was streamed."""
    if not (result.stream and result.usage_source is UsageSource.REPORTED and result.usage):
        return None
    visible = result.usage.completion_tokens - result.usage.reasoning_tokens
    return drift_ppm(visible, result.estimate.completion_tokens)


def reservation_of(session: Session, request_id: str) -> tuple[int, str | None] | None:
    """(id, fingerprint) of a request's reservation, or None when there is none yet."""
    row = session.execute(RESERVATION, {"b_request_id": request_id}).first()
    return None if row is None else (row.id, row.fingerprint)


def record_anomalies(
    session: Session, reservation_id: int, found: dict[AnomalyKind, str], now: datetime
) -> None:
    if found:
        session.execute(
            insert_ignore(session, anomalies),
            [
                {"reservation_id": reservation_id, "kind": str(kind), "detail": detail,
                 "detected_at": now}
                for kind, detail in found.items()
            ],
        )  # fmt: skip


def record_findings(
    session: Session,
    result: Result,
    effect: Effect,
    *,
    salt: str,
    now: datetime,
    non_streamable: tuple[str, ...] = (),
    meta: RequestMeta | None = None,
    reservation: tuple[int, str | None] | None = None,
    closed: bool = True,
    opened: bool = True,
) -> bool:
    """Record what ``apply_result`` returning ``effect`` for ``result`` leaves to be recorded.

    Never blocks settlement: the writes run in their own savepoint, and an error is logged and
    swallowed (returns False) so the call's ledger effect stands. ``meta`` (the request metadata)
    fills in the fingerprint; ``reservation`` is its (id, fingerprint) when the caller has read it
    already. ``closed`` / ``opened``: see ``worker.core.anomalies.classify``.
    """
    try:
        with session.begin_nested():
            _record(
                session, result, effect, salt=salt, now=now, non_streamable=non_streamable,
                meta=meta, reservation=reservation, closed=closed, opened=opened,
            )  # fmt: skip
    except Exception:
        log.exception("findings of %s not recorded", result.request_id)
        return False
    return True


def _record(
    session: Session,
    result: Result,
    effect: Effect,
    *,
    salt: str,
    now: datetime,
    non_streamable: tuple[str, ...],
    meta: RequestMeta | None,
    reservation: tuple[int, str | None] | None,
    closed: bool,
    opened: bool,
) -> None:
    if reservation is None:
        reservation = reservation_of(session, result.request_id)
        if reservation is None:
            return
    reservation_id, stored = reservation
    if meta is not None and stored is None:
        value = fingerprint(meta, salt)
        if value is not None:
            session.execute(SET_FINGERPRINT, {"b_id": reservation_id, "b_fingerprint": value})
    settled_now = effect in SETTLED_EFFECTS
    if settled_now:
        drift = None
        drift = settled_drift(result)
        session.execute(
            SET_OUTPUT,
            {
                "b_id": reservation_id,
                "b_output_hash": output_hash(result.choices, salt),
                "b_drift_ppm": drift,
            },
        )
    above = (
        settled_now
        and result.charge_micros is not None
        and result.charge_micros > result.reserved_micros
    )
    # A redelivered close (``duplicate``) or a closed reservation (``final``) was recorded the first
    # time; only the first application records anomalies.
    if effect not in NO_CHANGE:
        record_anomalies(
            session,
            reservation_id,
            classify(
                result,
                non_streamable=non_streamable,
                closed=closed,
                opened=opened,
                charged_above_hold=above,
                requested=None if meta is None else meta.model,
            ),
            now,
        )
    if effect == Effect.UNSETTLED:
        record_unsettled_event(session, reservation_id)
    if effect == Effect.CHARGED_LATE:
        detail = (
            f"charged {int(result.charge_micros or 0)} micros after its failure was resolved "
            "(its data came after the grace: a spool replayed late, or a stream slower than it)"
        )
        record_anomalies(session, reservation_id, {AnomalyKind.CHARGED_LATE: detail}, now)
    if effect in (Effect.SETTLED_LATE, Effect.CHARGED_LATE):
        # Finalized as abandoned, then completed by its close or by late data: it was slow, not
        # abandoned, so the sweeper's suspicion is withdrawn.
        _withdraw(session, [reservation_id], AnomalyKind.NO_CLOSE)


def columns_of(calls: Iterable[tuple[RequestMeta, Result]], salt: str) -> Columns:
    """What the batched path should write with its rows for these calls (``batch.Columns``): the
    fingerprint of each request, the output hash and drift of each settled one."""
    usage: dict[str, dict[str, Any]] = {}
    fingerprints: dict[str, str | None] = {}
    for meta, result in calls:
        fingerprints[result.request_id] = fingerprint(meta, salt)
        if result.outcome is Outcome.SETTLED:
            usage[result.request_id] = {
                "output_hash": output_hash(result.choices, salt),
                "drift_ppm": settled_drift(result),
            }
    return Columns(usage, fingerprints)


def record_findings_many(
    session: Session,
    items: list[tuple[int, Result, bool, str]],
    *,
    now: datetime,
    non_streamable: tuple[str, ...] = (),
    requested: Mapping[str, str] | None = None,
) -> None:
    """``record_findings`` for many calls the batched path just settled or marked unsettled.

    Each item is (reservation id, result, opened, effect), the effect ``settled`` or ``unsettled``;
    ``requested`` maps a request id to the model its request named (``classify``).
    Their fingerprints, output hashes and drift went in with the rows ``batch.apply_common`` wrote
    (``columns_of``); what is left, anomalies and alert events, takes two statements whatever the
    count: the same rows as ``record_findings`` would write one call at a time.
    """
    found, failed = [], []
    for reservation_id, result, opened, effect in items:
        settled = effect in SETTLED_EFFECTS
        if effect == Effect.UNSETTLED:
            failed.append(reservation_id)
        above = (
            settled
            and result.charge_micros is not None
            and result.charge_micros > result.reserved_micros
        )
        kinds = classify(
            result,
            non_streamable=non_streamable,
            opened=opened,
            charged_above_hold=above,
            requested=None if requested is None else requested.get(result.request_id),
        )
        found.extend(
            {"reservation_id": reservation_id, "kind": str(kind), "detail": detail,
             "detected_at": now}
            for kind, detail in kinds.items()
        )  # fmt: skip
    bulk.insert(session, anomalies, found, conflict=())
    record_unsettled_events(session, failed)


def withdraw(session: Session, request_id: str, kind: AnomalyKind) -> int:
    """Withdraw a ``no_open`` / ``no_close`` suspicion once the missing notification arrived.

    Two consumers of one group may take a call's open and its close in different batches and commit
    them in either order, and a busy worker may read a close after the sweeper already finalized the
    call; so both anomalies are only suspicions when recorded, and the late notification withdraws
    them (before the alert window closes, in practice). Returns the rows withdrawn.
    """
    return withdraw_many(session, [request_id], kind)


def withdraw_many(session: Session, request_ids: list[str], kind: AnomalyKind) -> int:
    """``withdraw`` for many requests in one statement (a close that was dead-lettered still came)."""
    if not request_ids:
        return 0
    return _withdraw(
        session,
        select(reservations.c.id).where(reservations.c.request_id.in_(request_ids)),
        kind,
    )


def _withdraw(session: Session, reservation_ids: Any, kind: AnomalyKind) -> int:
    result = session.execute(
        delete(anomalies).where(
            anomalies.c.kind == str(kind), anomalies.c.reservation_id.in_(reservation_ids)
        )
    )
    return max(result.rowcount or 0, 0)


def record_true_ups(session: Session, since: datetime) -> int:
    """``charge_above_hold`` for every flagged true-up since ``since`` that has none yet: the
    resolutions (``charge_estimate``) post true-ups outside the pipeline. Idempotent."""
    source = select(
        transactions.c.reservation_id,
        bindparam("b_kind", str(AnomalyKind.CHARGE_ABOVE_HOLD)),
        bindparam("b_detail", "the ledger posted a flagged true_up (charge above the hold)"),
        transactions.c.created_at,
    ).where(
        transactions.c.kind == str(Kind.TRUE_UP),
        transactions.c.flagged.is_(True),
        transactions.c.created_at >= since,
        transactions.c.reservation_id.is_not(None),
        ~select(anomalies.c.id)
        .where(
            anomalies.c.reservation_id == transactions.c.reservation_id,
            anomalies.c.kind == str(AnomalyKind.CHARGE_ABOVE_HOLD),
        )
        .exists(),
    )
    result = session.execute(
        insert_ignore(session, anomalies).from_select(
            ("reservation_id", "kind", "detail", "detected_at"), source
        )
    )
    return max(result.rowcount or 0, 0)


FALLBACK_RESERVATIONS = select(Reservation.id, Reservation.request_id).where(
    Reservation.request_id.in_(bindparam("b_ids", expanding=True))
)


def record_gateway_notes(session: Session, metas: Iterable[RequestMeta], now: datetime) -> None:
    """What the gateway said about a call in its request entry, as anomalies, once per
    reservation: ``account_fallback`` (billed to the fallback account: why) and
    ``admitted_unchecked`` (served without a spend check). One statement when there is none."""
    notes: dict[str, dict[AnomalyKind, str]] = {}
    for meta in metas:
        if meta.account_fallback:
            notes.setdefault(meta.request_id, {})[AnomalyKind.ACCOUNT_FALLBACK] = (
                f"billed to the fallback account {meta.account_fallback}"
            )
        if meta.admitted_unchecked:
            notes.setdefault(meta.request_id, {})[AnomalyKind.ADMITTED_UNCHECKED] = (
                f"served without a spend check (hold of {int(meta.reserved_micros)} micros)"
            )
    if not notes:
        return
    for reservation_id, request_id in session.execute(
        FALLBACK_RESERVATIONS, {"b_ids": sorted(notes)}
    ):
        record_anomalies(session, reservation_id, notes[request_id], now)
