"""The money rollup (``money_daily``): per (UTC day, account, model), the money the ledger moved.

Contract. Whoever posts a transaction adds its money here with ``add_money``; nothing is written at
that moment. The deltas are queued on the database connection, per transaction level (a savepoint
that rolls back drops its own deltas, one that is released hands them to its parent), and the
transaction's whole queue is written by ONE upsert just before the outermost COMMIT, rows in key
order (``write_money``).

Why the lock order matters: every writer of a (day, account, model) updates the same rollup row, so
the rollup is the one hot row of the schema. Written mid-transaction, it was locked before the
writer's other locks (reservation rows, the next call's rollup row), and two writers whose calls
came in different orders deadlocked on it. Written last and in key order, a transaction that holds a
rollup row lock waits only for rollup rows later in the same order, so no cycle can pass through
the rollup; it is held only for the COMMIT itself.

``install`` wires the queue into an engine (``database.make_engine`` does it for every engine); a
posting on an engine without it is refused, never silently left out of the rollup.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session

from models import Kind, MoneyDaily
from models.rollup import MONEY_COLUMNS
from worker.db import bulk
from worker.errors import LedgerError

money_daily = MoneyDaily.__table__
MONEY_KEY = ("day", "account_id", "model")
_QUEUE = "billing.money_queue"  # Connection.info: a stack of Deltas, one per transaction level
_engines: weakref.WeakSet[Engine] = weakref.WeakSet()  # the engines ``install`` wired


class Grain(NamedTuple):
    """A call's key in ``money_daily``: the UTC day its reservation was created, account, model."""

    day: date
    account_id: str
    model: str

    @classmethod
    def of(cls, account_id: str, model: str, created_at: datetime) -> Grain:
        return cls(created_at.astimezone(UTC).date(), account_id, model)


# Per grain: [held, charged, true_ups, released], in the order of ``MONEY_COLUMNS``.
Deltas = dict[Grain, list[int]]


def money_deltas(
    deltas: Deltas,
    grain: Grain,
    kind: Kind,
    legs: Sequence[tuple[int, int]],
    *,
    available_id: int,
    revenue_id: int,
) -> None:
    """Add one transaction's money to ``deltas``, as the report defines it from the entries:
    held = credits of a ``hold``; charged = revenue credits minus revenue debits; true-ups = revenue
    credits of a ``true_up``; released = credits to the customer's ``available`` account."""
    held = charged = true_ups = released = 0
    for account, amount in legs:
        if amount > 0 and kind == Kind.HOLD:
            held += amount
        if account == revenue_id:
            charged += amount
            if amount > 0 and kind == Kind.TRUE_UP:
                true_ups += amount
        elif account == available_id and amount > 0:
            released += amount
    if held or charged or true_ups or released:
        found = deltas.get(grain)
        if found is None:
            deltas[grain] = [held, charged, true_ups, released]
        else:
            found[0] += held
            found[1] += charged
            found[2] += true_ups
            found[3] += released


def _merge(into: Deltas, deltas: Deltas) -> None:
    for grain, money in deltas.items():
        found = into.get(grain)
        if found is None:
            into[grain] = list(money)
        else:
            for index, amount in enumerate(money):
                found[index] += amount


# --- the queue -------------------------------------------------------------------------------------


def add_money(session: Session, deltas: Deltas) -> None:
    """Queue ``deltas`` on the session's transaction; written in key order just before COMMIT."""
    if not deltas:
        return
    connection = session.connection()
    if connection.engine not in _engines:
        raise LedgerError("this engine does not queue the money rollup: build it with make_engine")
    stack = connection.info.get(_QUEUE)
    if not stack:
        # The transaction began before the queue saw it (its first statement autobegan it).
        stack = connection.info[_QUEUE] = [{}]
    _merge(stack[-1], deltas)


def flush_money(session: Session) -> None:
    """Write everything queued on the session's connection now, inside the current savepoint, for a
    transaction that reads the rollup back before it commits (verification, tests). The rows stay
    locked until the transaction ends, so the hot path never calls this."""
    stack = session.connection().info.get(_QUEUE)
    if stack:
        depth = len(stack)  # the savepoints stay open: one empty level each
        write_money(session, _take(stack))
        stack.extend({} for _ in range(depth))


def write_money(connection: Connection | Session, deltas: Deltas) -> None:
    """One upsert for all of ``deltas`` (INSERT … ON CONFLICT (day, account_id, model) DO UPDATE
    SET x = money_daily.x + excluded.x), rows in key order."""
    if not deltas:
        return
    rows = [
        {"day": grain.day, "account_id": grain.account_id, "model": grain.model,
         "held": money[0], "charged": money[1], "true_ups": money[2], "released": money[3]}
        for grain, money in sorted(deltas.items())
    ]  # fmt: skip
    bulk.insert(connection, money_daily, rows, conflict=MONEY_KEY, add=MONEY_COLUMNS)


def _take(stack: list[Deltas]) -> Deltas:
    """Every level's deltas merged into one, the stack left empty."""
    total: Deltas = {}
    while stack:
        _merge(total, stack.pop())
    return total


def _begin(connection: Connection) -> None:
    connection.info[_QUEUE] = [{}]


def _savepoint(connection: Connection, _name: Any) -> None:
    connection.info.setdefault(_QUEUE, [{}]).append({})


def _release(connection: Connection, _name: Any, _context: Any) -> None:
    stack = connection.info.get(_QUEUE)
    if stack and len(stack) > 1:
        top = stack.pop()
        _merge(stack[-1], top)


def _rollback_savepoint(connection: Connection, _name: Any, _context: Any) -> None:
    stack = connection.info.get(_QUEUE)
    if stack and len(stack) > 1:
        stack.pop()


def _commit(connection: Connection) -> None:
    stack = connection.info.pop(_QUEUE, None)
    if stack:
        write_money(connection, _take(stack))


def _rollback(connection: Connection) -> None:
    connection.info.pop(_QUEUE, None)


def install(engine: Engine) -> None:
    """Queue the money rollup on ``engine``'s connections (see the module docstring)."""
    if engine in _engines:
        return
    event.listen(engine, "begin", _begin)
    event.listen(engine, "savepoint", _savepoint)
    event.listen(engine, "release_savepoint", _release)
    event.listen(engine, "rollback_savepoint", _rollback_savepoint)
    event.listen(engine, "commit", _commit)
    event.listen(engine, "rollback", _rollback)
    _engines.add(engine)
