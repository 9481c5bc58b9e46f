"""The ledger's hot path in bulk: many holds, settlements and failures in a handful of statements.

Contract of ``apply_common``: the same effects as ``operations.hold`` for each hold and then
``operations.apply_result`` for each result, for the calls on the common path — a new reservation
with a positive hold, a settled, priced result for a reservation that is ``held`` (a charge above
the hold included, with its flagged true-up), and an unsettled result for a reservation that is
``held`` (the failure recorded, the hold kept) — and nothing at all for the others, which it hands
back for the per-call operations to decide (duplicates, late and unpriced results, voids). Never
commits.

Why: per call, the operations cost 5 to 7 round trips (savepoint, lock, transaction, entries, usage,
status). Here one batch costs a handful, whatever its size. The rules are not restated here: each
reservation is decided by ``transitions.decide``, its legs and rows come from ``legs`` and ``rows``,
and ``postings.write`` writes them, as on the per-call path; this module only chooses which
decisions it writes in bulk (``BULK_EFFECTS``). A call whose open and close are both in the batch
(the common case) is decided before its reservation is inserted, from the ``held`` status the insert
gives it, and the reservation is inserted in the status that decision leaves it in: one row version,
no lock to take and no UPDATE, its hold and charge posted by one ``postings.write`` (``_holds``).
A result whose reservation was recorded earlier is decided under the reservation's row lock
(``_results``). The batch's money is queued for ``money_daily`` like every posting's, and each call's
move in ``calls_daily`` from the same values its rows are written with (``rollup``).
If a bulk statement fails (a race on a unique key), the caller rolls back the savepoint around this
function and sends every call down the per-call path.
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
from worker.core.errors import LedgerError
from worker.core.request import RequestMeta
from worker.core.result import Outcome, Reason, Result
from worker.db import bulk
from worker.db.dialect import dialect, one_of
from worker.ledger import legs, postings, transitions
from worker.ledger.effects import Effect
from worker.ledger.operations import other_call
from worker.ledger.rollup import CallDeltas, CallState, add_calls, move_call
from worker.ledger.rows import failure_values, reservation_values, usage_values

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
        reservations.c.stream,
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


def _decided_at_hold(
    fresh: Mapping[str, RequestMeta], results: Sequence[Result], now: datetime
) -> dict[str, tuple[Result, transitions.Decision]]:
    """The results of requests held in this batch that ``transitions.decide`` settles or marks
    unsettled from ``held``: what the reservation's row will end this transaction as, if it is new.

    The same conditions as ``_results`` checks under the lock, on the row this batch is about to
    insert (its own request entry, so never another call's): same hold, same account, a decision
    this path writes in bulk."""
    decided = {}
    for result in results:
        meta = fresh.get(result.request_id)
        if meta is None or not (
            int(meta.reserved_micros) == result.reserved_micros
            and meta.account_id == result.account_id
        ):
            continue
        decision = _bulk_decision(result, Status.HELD, now)
        if decision is not None:
            decided[result.request_id] = (result, decision)
    return decided


def _bulk_decision(result: Result, status: str, now: datetime) -> transitions.Decision | None:
    """``transitions.decide`` for a reservation in ``status``, when its effect is one this path
    writes (``BULK_EFFECTS``); None leaves the result to the per-call path, which decides it again
    and records any refusal with its reason."""
    if result.outcome not in (Outcome.SETTLED, Outcome.UNSETTLED):
        return None
    try:
        decision = transitions.decide(
            result, status, detected_at=None, resolved_at=None, now=now, grace=NO_GRACE
        )
    except LedgerError:
        return None
    # An unpriced settled result is decided ``unsettled`` too: the per-call path records it, with
    # the findings that go with it.
    if decision.effect is Effect.SETTLED:
        return decision
    if decision.effect is Effect.UNSETTLED and result.outcome is Outcome.UNSETTLED:
        return decision
    return None


STATUS_OF = {Effect.SETTLED: Status.SETTLED, Effect.UNSETTLED: Status.UNSETTLED}


def _holds(
    session: Session,
    fresh: Mapping[str, RequestMeta],
    decided: Mapping[str, tuple[Result, transitions.Decision]],
    now: datetime,
    applied: Applied,
    columns: Columns,
) -> None:
    """Insert the fresh reservations and post their holds; a reservation whose result is in
    ``decided`` is inserted in the status its decision leaves it in, with the request's fingerprint,
    and its charge or failure is written with it: the row is written once, never updated in the
    same transaction. A request already recorded inserts nothing here (its result, if any, goes
    through ``_results``)."""
    if not fresh:
        return
    ids = postings.customers_of(session, {m.account_id for m in fresh.values()}, now)
    rows, written = [], {}
    for request_id, meta in fresh.items():
        values = written[request_id] = reservation_values(meta, now)
        found = decided.get(request_id)
        values["fingerprint"] = None
        if found is not None:
            values["status"] = str(STATUS_OF[found[1].effect])
            values["fingerprint"] = columns.fingerprints.get(request_id)
        rows.append(values)
    inserted = bulk.insert(
        session, reservations, rows, conflict=("request_id",), returning=("request_id", "id")
    )
    revenue = postings.system_account_id(session, LedgerKind.REVENUE)
    moves, usage, failures = [], [], []
    counted: CallDeltas = {}
    for request_id, reservation_id in inserted:
        meta = fresh[request_id]
        reserved = int(meta.reserved_micros)
        customer = ids[meta.account_id]
        grain = postings.Grain.of(meta.account_id, meta.model, meta.created_at)
        moves += legs.hold(reservation_id, reserved, customer, grain)
        applied.held.add(request_id)
        found = decided.get(request_id)
        if found is None:
            move_call(counted, None, CallState.of(written[request_id]))
            continue
        result, decision = found
        if decision.effect is Effect.SETTLED:
            charged = int(result.charge_micros or 0)  # decided ``settled``: priced
            moves += legs.charge(reservation_id, reserved, charged, customer, revenue, grain)
            values = usage_values(reservation_id, result, now)
            values.update(columns.usage.get(request_id, NO_COLUMNS))
            usage.append(values)
            move_call(counted, None, CallState.of(written[request_id], usage=values))
            applied.settled[request_id] = reservation_id
        else:
            reason = decision.reason or Reason(str(result.reason))  # ``unsettled`` has one
            failure = failure_values(reservation_id, result, reason, now)
            failures.append(failure)
            move_call(counted, None, CallState.of(written[request_id], failure=failure))
            applied.unsettled[request_id] = reservation_id
    postings.write(session, moves, now)
    add_calls(session, counted)
    bulk.insert(session, postings.usage_records, usage)
    bulk.insert(session, postings.failures, failures)


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
    """Lock the reservations of the batch's results with a hold that ``_holds`` did not decide
    (request-id order), decide each (``transitions.decide``, the rule both paths follow) and write
    the settlements and failures of those ``held`` by the same call (``digests``: of the request
    entry each result was read with). A ``held`` reservation has no failure, so no failure is read."""
    candidates = {
        r.request_id: r
        for r in results
        if r.reserved_micros > 0
        and r.outcome in (Outcome.SETTLED, Outcome.UNSETTLED)
        and r.request_id not in applied.settled
        and r.request_id not in applied.unsettled
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
        decision = _bulk_decision(result, row.status, now)
        if decision is None:
            continue
        if decision.effect is Effect.SETTLED:
            settling.append((row, result))
        else:
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
    counted: CallDeltas = {}
    for row, result in common:
        values = usage_values(row.id, result, now)
        values.update(columns.usage.get(row.request_id, NO_COLUMNS))
        usage.append(values)
        before = _state(row)
        move_call(counted, before, before._replace(status=str(Status.SETTLED), usage=values))
    bulk.insert(session, postings.usage_records, usage)
    add_calls(session, counted)
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
    counted: CallDeltas = {}
    for (row, _, _), failure in zip(common, rows, strict=True):
        before = _state(row)
        move_call(counted, before, before._replace(status=str(Status.UNSETTLED), failure=failure))
    add_calls(session, counted)
    decided = [(row, r) for row, r, _ in common]
    _set_status(session, decided, Status.UNSETTLED, now, columns.fingerprints, applied.unsettled)


def _state(row: Any) -> CallState:
    """A ``LOCK_MANY`` row as ``calls_daily`` counts it: ``held``, so no usage record or failure."""
    grain = postings.Grain.of(row.account_id, row.model, row.created_at)
    return CallState(grain, bool(row.stream), int(row.reserved_micros), str(row.status))


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
    fresh = {m.request_id: m for m in holds if m.reserved_micros > 0}
    _holds(session, fresh, _decided_at_hold(fresh, results, now), now, applied, columns)
    digests = {meta.request_id: meta.digest for meta in holds}
    _results(session, results, now, applied, columns, digests)
    return applied
