"""The ledger's hot path in bulk: many holds, settlements and failures in a handful of statements.

Contract of ``apply_common``: the same effects as ``operations.hold`` for each hold and then
``operations.apply_result`` for each result, for the calls on the common path — a new reservation
with a positive hold, a settled, priced result for a reservation that is ``held`` (a charge above
the hold included, with its flagged true-up), and an unsettled result for a reservation that is
``held`` (the failure recorded, the hold kept) — and nothing at all for the others, which it hands
back for the per-call operations to decide (duplicates, late and unpriced results, voids). Never
commits.

Why: per call, the operations cost 5 to 7 round trips (savepoint, lock, transaction, entries, usage,
status). Here one batch costs about ten, whatever its size. The rules are not restated here: each
reservation is decided by ``transitions.decide`` under the same row locks, its legs and rows come
from ``legs`` and ``rows``, and ``postings.write`` writes them, as on the per-call path; this module
only chooses which decisions it writes in bulk (``BULK_EFFECTS``). The batch's money is queued for ``money_daily`` like every posting's
(``rollup``). If a bulk statement fails (a race on a unique key), the caller rolls back the savepoint
around this function and sends every call down the per-call path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import LedgerKind, Status
from worker.db import bulk
from worker.db.dialect import dialect, one_of
from worker.errors import LedgerError
from worker.ledger import legs, postings, transitions
from worker.ledger.effects import Effect
from worker.ledger.operations import other_call
from worker.ledger.rows import failure_values, reservation_values, usage_values
from worker.request import RequestMeta
from worker.result import Outcome, Result

log = logging.getLogger(__name__)

reservations = postings.reservations
ledger_accounts = postings.ledger_accounts

transactions = postings.transactions
NO_GRACE = timedelta(0)  # grace matters only to an unsettled reservation, never decided here


LOCK_MANY = {
    engine_name: select(
        reservations.c.id,
        reservations.c.request_id,
        reservations.c.account_id,
        reservations.c.model,
        reservations.c.created_at,
        reservations.c.status,
        reservations.c.reserved_micros,
        reservations.c.request_digest,
    )
    .where(where)
    # Locks in request-id order, the order the consumer applies a batch in, so two consumers
    # whose batches share calls wait for each other instead of deadlocking.
    .order_by(reservations.c.request_id)
    .with_for_update()
    for engine_name, where in one_of(reservations.c.request_id, "b_ids").items()
}


NO_COLUMNS: Mapping[str, Any] = {}


@dataclass
class Columns:
    """Per request id, what ``findings`` records on the rows this module writes, so that it is
    written with them rather than by a second UPDATE of the same rows (each UPDATE writes a new row
    version and, for indexed columns such as ``drift_ppm`` or ``fingerprint``, new index entries):
    ``usage`` columns of a settled call's usage record (output hash, drift), and the request's
    ``fingerprints``, stored where the reservation has none yet."""

    usage: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    fingerprints: Mapping[str, str | None] = field(default_factory=dict)


@dataclass
class Applied:
    """What ``apply_common`` did: the request ids it held, and for those it settled or marked
    unsettled their reservation's id."""

    held: set[str] = field(default_factory=set)
    settled: dict[str, int] = field(default_factory=dict)
    unsettled: dict[str, int] = field(default_factory=dict)


def _holds(session: Session, metas: Sequence[RequestMeta], now: datetime, applied: Applied) -> None:
    fresh = {m.request_id: m for m in metas if m.reserved_micros > 0}
    if not fresh:
        return
    ids = postings.customers_of(session, {m.account_id for m in fresh.values()}, now)
    inserted = dict(
        bulk.insert(
            session,
            reservations,
            [reservation_values(m, now) for m in fresh.values()],
            conflict=("request_id",),
            returning=("request_id", "id"),
        )
    )
    moves = []
    for request_id, reservation_id in inserted.items():
        meta = fresh[request_id]
        grain = postings.Grain.of(meta.account_id, meta.model, meta.created_at)
        moves += legs.hold(reservation_id, int(meta.reserved_micros), ids[meta.account_id], grain)
        applied.held.add(request_id)
    postings.write(session, moves, now)


# The effects this path writes in bulk: from a ``held`` reservation, a charge or a failure. Every
# other decision (duplicates, late results, voids, unpriced results) goes to the per-call path.
BULK_EFFECTS = (Effect.SETTLED, Effect.UNSETTLED)


def _results(
    session: Session,
    results: Sequence[Result],
    now: datetime,
    applied: Applied,
    columns: Columns,
    digests: Mapping[str, str | None],
) -> None:
    """Lock the reservations of the batch's results with a hold (request-id order), decide each
    (``transitions.decide``, the rule both paths follow) and write the settlements and failures of
    those ``held`` by the same call (``digests``: of the request entry each result was read with).
    A ``held`` reservation has no failure, so no failure is read."""
    candidates = {
        r.request_id: r
        for r in results
        if r.reserved_micros > 0 and r.outcome in (Outcome.SETTLED, Outcome.UNSETTLED)
    }
    if not candidates:
        return
    name = dialect(session)
    settling, failing = [], []
    for row in session.execute(LOCK_MANY[name], {"b_ids": sorted(candidates)}).all():
        result = candidates[row.request_id]
        if not (
            row.reserved_micros == result.reserved_micros
            and row.account_id == result.account_id
            and not other_call(row.request_digest, digests.get(row.request_id))
        ):
            continue  # the per-call path refuses it, with the reason
        if row.status != Status.HELD:
            continue
        try:
            decision = transitions.decide(
                result, row.status, detected_at=None, resolved_at=None, now=now, grace=NO_GRACE
            )
        except LedgerError:
            continue  # the per-call path refuses it, with the reason
        # An unpriced settled result is decided ``unsettled`` too: the per-call path records it,
        # with the findings that go with it.
        if decision.effect is Effect.SETTLED:
            settling.append((row, result))
        elif decision.effect is Effect.UNSETTLED and result.outcome is Outcome.UNSETTLED:
            failing.append((row, result, decision))
    _settlements(session, settling, now, applied, columns)
    _failures(session, failing, now, applied, columns)


def _settlements(
    session: Session,
    common: list[tuple[Any, Result]],
    now: datetime,
    applied: Applied,
    columns: Columns,
) -> None:
    if not common:
        return
    ids = postings.customers_of(session, {row.account_id for row, _ in common}, now)
    revenue = postings.system_account_id(session, LedgerKind.REVENUE)
    moves = []
    for row, result in common:
        grain = postings.Grain.of(row.account_id, row.model, row.created_at)
        moves += legs.charge(
            row.id, row.reserved_micros, int(result.charge_micros), ids[row.account_id], revenue,
            grain,
        )  # fmt: skip
    postings.write(session, moves, now)
    usage = []
    for row, result in common:
        values = usage_values(row.id, result, now)
        values.update(columns.usage.get(row.request_id, NO_COLUMNS))
        usage.append(values)
    bulk.insert(session, postings.usage_records, usage)
    _set_status(session, common, Status.SETTLED, now, columns.fingerprints, applied.settled)


def _failures(
    session: Session,
    common: list[tuple[Any, Result, transitions.Decision]],
    now: datetime,
    applied: Applied,
    columns: Columns,
) -> None:
    """The hold stays, the failure is recorded with its exposure. No money moves, so
    ``money_daily`` is untouched."""
    if not common:
        return
    rows = [failure_values(row.id, r, decision.reason, now) for row, r, decision in common]
    bulk.insert(session, postings.failures, rows)
    decided = [(row, r) for row, r, _ in common]
    _set_status(session, decided, Status.UNSETTLED, now, columns.fingerprints, applied.unsettled)


def _set_status(
    session: Session,
    common: list[tuple[Any, Result]],
    status: Status,
    now: datetime,
    fingerprints: Mapping[str, str | None],
    decided: dict[str, int],
) -> None:
    """One UPDATE for the reservations' new status and, where none is stored yet, the request's
    fingerprint (one new row version instead of two); ``decided`` gets each reservation's id."""
    rows = []
    for row, _ in common:
        fingerprint = fingerprints.get(row.request_id)
        rows.append(
            {"id": row.id, "status": str(status), "updated_at": now, "fingerprint": fingerprint}
        )
        decided[row.request_id] = row.id
    bulk.update_many(session, reservations, rows, match="id", keep=("fingerprint",))


def apply_common(
    session: Session,
    holds: Sequence[RequestMeta],
    results: Sequence[Result],
    *,
    now: datetime,
    columns: Columns | None = None,
) -> Applied:
    """Apply the common-path holds, then the common-path results; see the module docstring.

    A request id may appear in both (its open and close in one batch): it is held, then settled.
    Every request id must appear at most once in each sequence. A result whose request's metadata
    is among ``holds`` is applied only to a reservation recorded from the same request entry
    (``operations.other_call``); one of another call is left to the per-call path, which refuses
    it. ``columns``: what the findings add to the rows written here, written with them (see
    ``Columns``).
    """
    applied = Applied()
    columns = columns or Columns()
    _holds(session, holds, now, applied)
    digests = {meta.request_id: meta.digest for meta in holds}
    _results(session, results, now, applied, columns, digests)
    return applied
