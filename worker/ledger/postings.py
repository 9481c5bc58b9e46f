"""The ledger's write plumbing: ledger account ids, the one writer of balanced transactions, the
reservation lock.

Contract. Nothing here decides anything: the rules (which legs, which transition) are pure functions
in ``legs``, ``transitions`` and ``rows``, and both write paths (``batch`` for many calls in a few
statements, ``operations`` for one call) execute what those return through these functions, inside
the caller's transaction (never a commit). Statements are built once, at import.

Every transaction's money is also added to ``money_daily`` (``models.rollup``), the report's per-day
sums, in the same database transaction: the deltas are queued and written once, in key order, just
before the transaction commits (``worker.ledger.rollup``, which also holds the one definition of them).
Likewise every change of a call's reservation status, usage record or failure moves the call in
``calls_daily`` (``rollup.move_call``): ``insert_reservation``, ``set_status`` and ``move_call`` here,
and ``batch`` for its bulk writes.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Engine, and_, bindparam, event, insert, select, update
from sqlalchemy.orm import Session

from models import (
    Account,
    Action,
    Entry,
    Failure,
    Kind,
    LedgerAccount,
    LedgerKind,
    Reservation,
    Status,
    Transaction,
    UsageRecord,
    ledger_account_name,
)
from worker.core.errors import LedgerError
from worker.db import bulk
from worker.db.dialect import dialect, insert_ignore_on, one_of
from worker.ledger.legs import Customer, Posting, check_balanced, check_legs
from worker.ledger.rollup import (
    CallDeltas,
    CallState,
    Deltas,
    Grain,
    add_calls,
    add_money,
    money_deltas,
)
from worker.ledger.rollup import move_call as _move

accounts = Account.__table__
ledger_accounts = LedgerAccount.__table__
reservations = Reservation.__table__
transactions = Transaction.__table__
entries = Entry.__table__
usage_records = UsageRecord.__table__
failures = Failure.__table__


INSERT_ACCOUNT = insert_ignore_on(accounts, "id")
INSERT_LEDGER_ACCOUNT = insert_ignore_on(ledger_accounts, "name")
INSERT_RESERVATION = insert_ignore_on(reservations, "request_id", reservations.c.id)
INSERT_TRANSACTION = insert(transactions).returning(transactions.c.id)
INSERT_ENTRY = insert(entries)
INSERT_USAGE = insert(usage_records)
INSERT_FAILURE = insert(failures)
SET_STATUS = (
    update(reservations)
    .where(reservations.c.id == bindparam("b_id"))
    .values(status=bindparam("b_status"), updated_at=bindparam("b_now"))
)
CLOSE_FAILURE = (
    update(failures)
    .where(failures.c.id == bindparam("b_id"), failures.c.resolved_at.is_(None))
    .values(
        resolved_by=bindparam("b_who"),
        resolved_at=bindparam("b_now"),
        action=bindparam("b_action"),
        note=bindparam("b_note"),
    )
)
LEDGER_IDS = select(ledger_accounts.c.kind, ledger_accounts.c.id).where(
    ledger_accounts.c.name.in_(bindparam("b_names", expanding=True))
)


def insert_reservation(session: Session, values: dict[str, Any]) -> int | None:
    """The new reservation's id, or None when the request is already recorded; a new one is
    counted in ``calls_daily``."""
    found = session.execute(INSERT_RESERVATION[dialect(session)], values).scalar_one_or_none()
    if found is not None:
        move_call(session, None, CallState.of(values))
    return found


def move_call(session: Session, before: CallState | None, after: CallState | None) -> None:
    """Queue one call's move in ``calls_daily`` from the row of ``before`` to that of ``after``."""
    deltas: CallDeltas = {}
    _move(deltas, before, after)
    add_calls(session, deltas)


# --- ledger account ids ----------------------------------------------------------------------------

_SESSION_KEY = "billing.ledger_ids"
# System accounts are seeded by the migration and never deleted, so their ids are safe to keep per
# engine. Customer accounts may be created in a transaction that rolls back: their ids are kept per
# session and forgotten on any rollback (savepoints included).
_system_ids: weakref.WeakKeyDictionary[Engine, dict[str, int]] = weakref.WeakKeyDictionary()


def _forget_ids(session: Session, *_: Any) -> None:
    session.info.pop(_SESSION_KEY, None)


def _session_ids(session: Session) -> dict[str, Customer]:
    ids = session.info.get(_SESSION_KEY)
    if ids is None:
        ids = session.info[_SESSION_KEY] = {}
        if not session.info.get("billing.listening"):
            event.listen(session, "after_soft_rollback", _forget_ids)
            session.info["billing.listening"] = True
    return ids


def system_account_id(session: Session, kind: LedgerKind) -> int:
    bind = session.get_bind()
    engine = bind if isinstance(bind, Engine) else bind.engine
    cached = _system_ids.setdefault(engine, {})
    found = cached.get(kind)
    if found is None:
        found = session.execute(
            select(ledger_accounts.c.id).where(ledger_accounts.c.name == ledger_account_name(kind))
        ).scalar_one_or_none()
        if found is None:
            raise LedgerError(
                f"system ledger account {kind!r} is missing: run `billing db upgrade`"
            )
        cached[kind] = found
    return found


def customer_ids(session: Session, account_id: str, now: datetime) -> Customer:
    """A customer's ledger account ids, creating the account on first use."""
    ids = _session_ids(session)
    found = ids.get(account_id)
    if found is not None:
        return found
    name = dialect(session)
    session.execute(INSERT_ACCOUNT[name], {"id": account_id, "created_at": now})
    names = [
        ledger_account_name(kind, account_id) for kind in (LedgerKind.AVAILABLE, LedgerKind.HELD)
    ]
    session.execute(
        INSERT_LEDGER_ACCOUNT[name],
        [
            {"name": name, "kind": str(kind), "account_id": account_id}
            for name, kind in zip(names, (LedgerKind.AVAILABLE, LedgerKind.HELD), strict=True)
        ],
    )
    by_kind = dict(session.execute(LEDGER_IDS, {"b_names": names}).all())
    found = Customer(by_kind[LedgerKind.AVAILABLE], by_kind[LedgerKind.HELD])
    ids[account_id] = found
    return found


CUSTOMERS = {
    name: select(ledger_accounts.c.account_id, ledger_accounts.c.kind, ledger_accounts.c.id).where(
        where
    )
    for name, where in one_of(ledger_accounts.c.account_id, "b_accounts").items()
}


def customers_of(session: Session, accounts: set[str], now: datetime) -> dict[str, Customer]:
    """``customer_ids`` of many customers in one statement (the new ones one by one)."""
    found: dict[str, dict[str, int]] = {}
    if accounts:
        statement = CUSTOMERS[dialect(session)]
        for account, kind, ledger_id in session.execute(
            statement, {"b_accounts": sorted(accounts)}
        ):
            found.setdefault(account, {})[kind] = ledger_id
    ids = {}
    for account in accounts:
        kinds = found.get(account, {})
        if LedgerKind.AVAILABLE in kinds and LedgerKind.HELD in kinds:
            ids[account] = Customer(kinds[LedgerKind.AVAILABLE], kinds[LedgerKind.HELD])
        else:  # first sight of this customer: create its accounts the ordinary way
            ids[account] = customer_ids(session, account, now)
    return ids


# --- posting ---------------------------------------------------------------------------------------


def write(session: Session, postings: Sequence[Posting], now: datetime) -> None:
    """Write balanced transactions (``legs``) and their entries in one statement
    (``bulk.insert_linked``; two on SQLite), and queue their money for ``money_daily``. Zero legs
    are dropped (entries are strictly positive); a posting left with nothing to move is not
    written. A charge above its hold (a true-up) is logged as a warning."""
    moving = []
    for posting in postings:
        check_balanced(posting)
        legs = tuple((account, amount) for account, amount in posting.legs if amount != 0)
        if legs:
            moving.append(posting._replace(legs=legs))
    if not moving:
        return
    revenue = system_account_id(session, LedgerKind.REVENUE)
    txns, rows = [], []
    deltas: Deltas = {}
    for posting in moving:
        kind = str(posting.kind)
        txns.append(
            {"reservation_id": posting.reservation_id, "kind": kind, "flagged": posting.flagged,
             "created_at": now}
        )  # fmt: skip
        # (reservation, kind) is unique: it names each entry's transaction until that has an id.
        named = {"reservation_id": posting.reservation_id, "kind": kind}
        rows.extend({**named, **entry} for entry in _entry_rows(posting.legs))
        money_deltas(
            deltas, posting.grain, posting.kind, posting.legs,
            available_id=posting.available_id, revenue_id=revenue, flagged=posting.flagged,
        )  # fmt: skip
        # A true-up is not logged: it is a flagged transaction, in the reports' true-ups and
        # alerted as ``charge_above_hold`` (worker.ledger.findings); a line per call was noise.
    bulk.insert_linked(
        session, transactions, txns, entries, rows,
        key=("reservation_id", "kind"), link="transaction_id",
    )  # fmt: skip
    add_money(session, deltas)


def _entry_rows(legs: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """The entries of a transaction, without it: one per non-zero leg, amount positive, direction
    its sign."""
    return [
        {
            "ledger_account_id": account,
            "amount": abs(amount),
            "direction": "credit" if amount > 0 else "debit",
        }
        for account, amount in legs
        if amount != 0
    ]


def write_unreserved(
    session: Session, kind: Kind, legs: Sequence[tuple[int, int]], now: datetime
) -> int:
    """Write one balanced transaction that belongs to no reservation (funding an account); its id.
    No call's money moves, so nothing reaches ``money_daily``."""
    check_legs(kind, legs)
    if any(amount == 0 for _, amount in legs):
        raise LedgerError(f"refusing a {kind} transaction with an empty leg: {tuple(legs)}")
    txn_id = session.execute(
        INSERT_TRANSACTION,
        {"reservation_id": None, "kind": str(kind), "flagged": False, "created_at": now},
    ).scalar_one()
    session.execute(
        INSERT_ENTRY, [{"transaction_id": txn_id, **entry} for entry in _entry_rows(legs)]
    )
    return int(txn_id)


class Locked(NamedTuple):
    """A reservation read under its row lock, with its ledger accounts and any failure."""

    id: int
    account_id: str
    model: str
    created_at: datetime
    status: str
    reserved: int
    available_id: int
    held_id: int
    stream: bool
    failure_id: int | None
    detected_at: datetime | None
    exposure: int | None
    resolved_at: datetime | None
    action: str | None
    reason: str | None

    @property
    def grain(self) -> Grain:
        return Grain.of(self.account_id, self.model, self.created_at)

    @property
    def state(self) -> CallState:
        """The call as ``calls_daily`` counts it now (a locked reservation has no usage record:
        only ``held`` and ``unsettled`` ones change)."""
        failure = None
        if self.failure_id is not None:
            failure = {"reason": self.reason, "exposure_micros": self.exposure,
                       "action": self.action}  # fmt: skip
        return CallState(self.grain, self.stream, self.reserved, self.status, None, failure)

    @property
    def customer(self) -> Customer:
        return Customer(self.available_id, self.held_id)


_available = ledger_accounts.alias("available")
_held = ledger_accounts.alias("held")

LOCK = (
    select(
        reservations.c.id,
        reservations.c.account_id,
        reservations.c.model,
        reservations.c.created_at,
        reservations.c.status,
        reservations.c.reserved_micros,
        _available.c.id,
        _held.c.id,
        reservations.c.stream,
    )
    .select_from(
        reservations.join(
            _available,
            and_(
                _available.c.account_id == reservations.c.account_id,
                _available.c.kind == str(LedgerKind.AVAILABLE),
            ),
        ).join(
            _held,
            and_(
                _held.c.account_id == reservations.c.account_id,
                _held.c.kind == str(LedgerKind.HELD),
            ),
        )
    )
    .where(reservations.c.request_id == bindparam("b_request_id"))
    .with_for_update(of=reservations)
)
FAILURE_OF = select(
    failures.c.id,
    failures.c.detected_at,
    failures.c.exposure_micros,
    failures.c.resolved_at,
    failures.c.action,
    failures.c.reason,
).where(failures.c.reservation_id == bindparam("b_id"))
NO_FAILURE = (None, None, None, None, None, None)


def lock(session: Session, request_id: str) -> Locked | None:
    """Read a reservation, locking its row until the caller's transaction ends, then its failure.

    Lock first, read second: on PostgreSQL a statement that waited for the row lock re-reads the
    locked row but not the rows joined to it, so a failure written by the transaction it waited for
    would be missed. The failure is read by a second statement, which sees every commit before it.
    """
    row = session.execute(LOCK, {"b_request_id": request_id}).first()
    if row is None:
        return None
    failure = session.execute(FAILURE_OF, {"b_id": row[0]}).first()
    return Locked(*row, *(failure or NO_FAILURE))


def set_status(
    session: Session,
    row: Locked,
    status: Status,
    now: datetime,
    *,
    usage: dict[str, Any] | None = None,
    failure: dict[str, Any] | None = None,
) -> None:
    """Write the reservation's new status and move the call in ``calls_daily``: to ``status``,
    with the ``usage`` record or the ``failure`` written beside it, if any (otherwise its failure as
    it was)."""
    session.execute(SET_STATUS, {"b_id": row.id, "b_status": str(status), "b_now": now})
    before = row.state
    after = before._replace(status=str(status), usage=usage, failure=failure or before.failure)
    move_call(session, before, after)


def close_failure(
    session: Session, row: Locked, action: Action, *, who: str, note: str, now: datetime
) -> None:
    """Write the failure's one resolution; a second one is refused."""
    closed = session.execute(
        CLOSE_FAILURE,
        {"b_id": row.failure_id, "b_who": who, "b_now": now, "b_action": str(action),
         "b_note": note},
    ).rowcount  # fmt: skip
    if closed != 1:
        raise LedgerError(f"failure {row.failure_id} is already resolved")
