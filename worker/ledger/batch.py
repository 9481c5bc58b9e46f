"""The ledger's hot path in bulk: many holds, settlements and failures in a handful of statements.

Contract of ``apply_common``: the same effects as ``operations.hold`` for each hold and then
``operations.apply_result`` for each result, for the calls on the common path — a new reservation
with a positive hold, a settled, priced result for a reservation that is ``held`` (a charge above
the hold included, with its flagged true-up), and an unsettled result for a reservation that is
``held`` (the failure recorded, the hold kept) — and nothing at all for the others, which it hands
back for the per-call operations to decide (duplicates, late and unpriced results, voids). Never
commits.

Why: per call, the operations cost 5 to 7 round trips (savepoint, lock, transaction, entries, usage,
status). Here one batch costs about ten, whatever its size, and the rules stay in one place: this
module only takes the cases whose outcome the rules leave no choice about, and checks them under the
same row locks. The batch's money is queued for ``money_daily`` like every posting's
(``rollup``). If a bulk statement fails (a race on a unique key), the caller rolls back the savepoint
around this function and sends every call down the per-call path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import any_, bindparam, select
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.orm import Session

from models import Kind, LedgerKind, Status
from worker.errors import LedgerError
from worker.ledger import bulk, postings
from worker.ledger.operations import (
    failure_values,
    other_call,
    reservation_values,
    usage_values,
)
from worker.request import RequestMeta
from worker.result import Outcome, Reason, Result

log = logging.getLogger(__name__)

reservations = postings.reservations
ledger_accounts = postings.ledger_accounts

transactions = postings.transactions


def _one_of(column: Any, name: str) -> dict[str, Any]:
    """``column`` is one of the list bound to ``name``, per dialect: ``= ANY(array)`` on PostgreSQL
    (one statement text whatever the list's length), an expanding ``IN`` on SQLite."""
    return {
        "postgresql": column == any_(bindparam(name, type_=pg.ARRAY(column.type))),
        "sqlite": column.in_(bindparam(name, expanding=True)),
    }


CUSTOMER_IDS = {
    dialect: select(
        ledger_accounts.c.account_id, ledger_accounts.c.kind, ledger_accounts.c.id
    ).where(where)
    for dialect, where in _one_of(ledger_accounts.c.account_id, "b_accounts").items()
}
LOCK_MANY = {
    dialect: select(
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
    for dialect, where in _one_of(reservations.c.request_id, "b_ids").items()
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


def _customer_ids(
    session: Session, accounts: set[str], now: datetime
) -> dict[str, tuple[int, int]]:
    found: dict[str, dict[str, int]] = {}
    if accounts:
        statement = CUSTOMER_IDS[postings._dialect(session)]
        for account, kind, ledger_id in session.execute(
            statement, {"b_accounts": sorted(accounts)}
        ):
            found.setdefault(account, {})[kind] = ledger_id
    ids = {}
    for account in accounts:
        kinds = found.get(account, {})
        if LedgerKind.AVAILABLE in kinds and LedgerKind.HELD in kinds:
            ids[account] = (kinds[LedgerKind.AVAILABLE], kinds[LedgerKind.HELD])
        else:  # first sight of this customer: create its accounts the ordinary way
            ids[account] = postings.customer_ids(session, account, now)
    return ids


class Posting(NamedTuple):
    reservation_id: int
    kind: Kind
    legs: list[tuple[int, int]]
    flagged: bool
    grain: postings.Grain
    available_id: int


def _post_many(
    session: Session, postings_: list[Posting], now: datetime, deltas: postings.Deltas
) -> None:
    """Write balanced transactions in two statements: transactions, then all their entries. Their
    money is added to ``deltas``, which the caller writes to ``money_daily`` once per batch."""
    if not postings_:
        return
    written = bulk.insert(
        session,
        transactions,
        [
            {
                "reservation_id": p.reservation_id,
                "kind": str(p.kind),
                "flagged": p.flagged,
                "created_at": now,
            }
            for p in postings_
        ],
        returning=("id", "reservation_id", "kind"),
    )
    # (reservation, kind) is unique, so it names each new transaction whatever order rows return in.
    txn_ids = {(reservation_id, kind): txn_id for txn_id, reservation_id, kind in written}
    revenue = postings.system_account_id(session, LedgerKind.REVENUE)
    rows = []
    for posting in postings_:
        txn_id = txn_ids[(posting.reservation_id, str(posting.kind))]
        legs = posting.legs
        if sum(amount for _, amount in legs) != 0:
            raise LedgerError(f"refusing an unbalanced {posting.kind} transaction: {legs}")
        rows.extend(
            {
                "transaction_id": txn_id,
                "ledger_account_id": account,
                "amount": abs(amount),
                "direction": "credit" if amount > 0 else "debit",
            }
            for account, amount in legs
            if amount != 0
        )
        postings.money_deltas(
            deltas, posting.grain, posting.kind, legs,
            available_id=posting.available_id, revenue_id=revenue,
        )  # fmt: skip
    bulk.insert(session, postings.entries, rows)


def _holds(
    session: Session,
    metas: Sequence[RequestMeta],
    now: datetime,
    applied: Applied,
    deltas: postings.Deltas,
) -> None:
    fresh = {m.request_id: m for m in metas if m.reserved_micros > 0}
    if not fresh:
        return
    ids = _customer_ids(session, {m.account_id for m in fresh.values()}, now)
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
        available_id, held_id = ids[meta.account_id]
        amount = int(meta.reserved_micros)
        grain = postings.Grain.of(meta.account_id, meta.model, meta.created_at)
        legs = [(available_id, -amount), (held_id, amount)]
        moves.append(Posting(reservation_id, Kind.HOLD, legs, False, grain, available_id))
        applied.held.add(request_id)
    _post_many(session, moves, now, deltas)


def _results(
    session: Session,
    results: Sequence[Result],
    now: datetime,
    applied: Applied,
    deltas: postings.Deltas,
    columns: Columns,
    digests: Mapping[str, str | None],
) -> None:
    """Lock the reservations of the batch's settled, priced results and of its unsettled ones in
    one statement (request-id order), then settle, or mark unsettled, those that are ``held`` by
    the same call (``digests``: of the request entry each result was read with)."""
    candidates = {
        r.request_id: r
        for r in results
        if r.reserved_micros > 0
        and (
            (r.outcome is Outcome.SETTLED and r.charge_micros is not None)
            or (r.outcome is Outcome.UNSETTLED and r.reason is not None)
        )
    }
    if not candidates:
        return
    dialect = postings._dialect(session)
    settling, failing = [], []
    for row in session.execute(LOCK_MANY[dialect], {"b_ids": sorted(candidates)}).all():
        result = candidates[row.request_id]
        if not (
            row.status == Status.HELD
            and row.reserved_micros == result.reserved_micros
            and row.account_id == result.account_id
            and not other_call(row.request_digest, digests.get(row.request_id))
        ):
            continue
        if result.outcome is Outcome.UNSETTLED:
            failing.append((row, result))
        elif result.charge_micros >= 0:
            settling.append((row, result))
    _settlements(session, settling, now, applied, deltas, columns)
    _failures(session, failing, now, applied, columns)


def _settlements(
    session: Session,
    common: list[tuple[Any, Result]],
    now: datetime,
    applied: Applied,
    deltas: postings.Deltas,
    columns: Columns,
) -> None:
    if not common:
        return
    ids = _customer_ids(session, {row.account_id for row, _ in common}, now)
    revenue = postings.system_account_id(session, LedgerKind.REVENUE)
    moves: list[Posting] = []
    for row, result in common:
        available_id, held_id = ids[row.account_id]
        reserved, charge = row.reserved_micros, int(result.charge_micros)
        posted = min(charge, reserved)
        grain = postings.Grain.of(row.account_id, row.model, row.created_at)
        legs = [(held_id, -reserved), (revenue, posted), (available_id, reserved - posted)]
        moves.append(Posting(row.id, Kind.CHARGE, legs, False, grain, available_id))
        if charge > reserved:
            # As postings.charge: the whole hold is posted, the excess is a separate, flagged
            # true-up from available; never a silent cap, never a negative hold.
            excess = charge - reserved
            legs = [(available_id, -excess), (revenue, excess)]
            moves.append(Posting(row.id, Kind.TRUE_UP, legs, True, grain, available_id))
            log.warning(
                "charge above hold: reservation=%s charge=%s hold=%s", row.id, charge, reserved
            )
    _post_many(session, moves, now, deltas)
    usage = []
    for row, result in common:
        values = usage_values(row.id, result, now)
        values.update(columns.usage.get(row.request_id, NO_COLUMNS))
        usage.append(values)
    bulk.insert(session, postings.usage_records, usage)
    _set_status(session, common, Status.SETTLED, now, columns.fingerprints, applied.settled)


def _failures(
    session: Session,
    common: list[tuple[Any, Result]],
    now: datetime,
    applied: Applied,
    columns: Columns,
) -> None:
    """As ``operations.mark_unsettled`` for held reservations: the hold stays, the failure is
    recorded with its exposure. No money moves, so ``money_daily`` is untouched."""
    if not common:
        return
    bulk.insert(
        session,
        postings.failures,
        [failure_values(row.id, r, Reason(r.reason), now) for row, r in common],
    )
    _set_status(session, common, Status.UNSETTLED, now, columns.fingerprints, applied.unsettled)


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
    deltas: postings.Deltas = {}
    columns = columns or Columns()
    _holds(session, holds, now, applied, deltas)
    digests = {meta.request_id: meta.digest for meta in holds}
    _results(session, results, now, applied, deltas, columns, digests)
    postings.add_money(session, deltas)
    return applied
