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

The call rollup (``calls_daily``) is queued and written the same way, after the money and also in
key order (so the lock order is: every ``money_daily`` row, then every ``calls_daily`` row, each in
key order). Each call is counted in the one row its state names (``CallState``: its reservation's
status, usage record and failure); whoever changes that state queues the move from the row before to
the row after (``move_call``), from the values it writes.

``install`` wires the queue into an engine (``database.make_engine`` does it for every engine); a
posting on an engine without it is refused, never silently left out of the rollup.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session

from models import CallsDaily, Kind, MoneyDaily
from models.rollup import CALL_COLUMNS, CALL_STATE_KEY, MONEY_COLUMNS
from worker.core.errors import LedgerError
from worker.db import bulk

money_daily = MoneyDaily.__table__
calls_daily = CallsDaily.__table__
MONEY_KEY = ("day", "account_id", "model")
CALL_KEY = (*MONEY_KEY, *CALL_STATE_KEY)
_QUEUE = "billing.money_queue"  # Connection.info: a stack of Pending, one per transaction level
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
    flagged: bool = False,
) -> None:
    """Add one transaction's money to ``deltas``, as the report defines it from the entries:
    held = credits of a ``hold``; charged = revenue credits minus revenue debits; true-ups = revenue
    credits of a ``true_up``, and the revenue legs of a flagged ``charge`` (a call charged late,
    after its hold was resolved: money beyond the hold, either way); released = credits to the
    customer's ``available`` account, except a late charge's (a refund of an estimate charged too
    high, not a hold released)."""
    held = charged = true_ups = released = 0
    late = flagged and kind == Kind.CHARGE
    for account, amount in legs:
        if amount > 0 and kind == Kind.HOLD:
            held += amount
        if account == revenue_id:
            charged += amount
            if (amount > 0 and kind == Kind.TRUE_UP) or late:
                true_ups += amount
        elif account == available_id and amount > 0 and not late:
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


# --- the call rollup -------------------------------------------------------------------------------


class CallState(NamedTuple):
    """What ``calls_daily`` knows of one call: its reservation's grain, stream flag, hold and status,
    and the values of its usage record and failure as the ledger writes them (``rows.usage_values``,
    ``rows.failure_values``; a failure's ``action`` once resolved), None when it has none."""

    grain: Grain
    stream: bool
    reserved: int
    status: str
    usage: Mapping[str, Any] | None = None
    failure: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, reservation: Mapping[str, Any], **more: Any) -> CallState:
        """The state of a reservation row's values (``rows.reservation_values``)."""
        grain = Grain.of(reservation["account_id"], reservation["model"], reservation["created_at"])
        return cls(
            grain,
            bool(reservation["stream"]),
            int(reservation["reserved_micros"]),
            str(reservation["status"]),
            **more,
        )


# Per (day, account, model, status, usage source, provider, usage shape, reason, action): the
# measures of ``CALL_COLUMNS``.
CallDeltas = dict[tuple[Any, ...], list[int]]


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def call_key(state: CallState) -> tuple[Any, ...]:
    """The ``calls_daily`` row a call in ``state`` is counted in ('' for what it has none of)."""
    usage, failure = state.usage or {}, state.failure or {}
    return (
        *state.grain,
        state.status,
        _text(usage.get("usage_source")),
        _text(usage.get("provider")),
        _text(usage.get("usage_shape")),
        _text(failure.get("reason")),
        _text(failure.get("action")),
    )


def call_measures(state: CallState) -> list[int]:
    """The call's measures, in the order of ``CALL_COLUMNS``."""
    usage, failure = state.usage, state.failure
    charged = cost = costed = 0
    if usage is not None:
        charged = int(usage["charge_micros"])
        if usage.get("provider_cost_micros") is not None:
            costed, cost = 1, int(usage["provider_cost_micros"])
    exposure = 0
    if failure is not None and failure.get("exposure_micros") is not None:
        exposure = int(failure["exposure_micros"])
    return [1, int(state.stream), state.reserved, charged, costed, charged * costed, cost, exposure]


def move_call(deltas: CallDeltas, before: CallState | None, after: CallState | None) -> None:
    """Move one call from the row of ``before`` to the row of ``after`` (None: not counted); a row
    this move leaves at zero is dropped (a move within one row changes nothing). Only the rows it
    touched are looked at: a batch's moves stay linear in its calls."""
    for state, sign in ((before, -1), (after, 1)):
        if state is None:
            continue
        key = call_key(state)
        measures = call_measures(state)
        found = deltas.get(key)
        if found is None:
            deltas[key] = [sign * m for m in measures]
        else:
            for index, amount in enumerate(measures):
                found[index] += sign * amount
            if not any(found):
                del deltas[key]


def _merge(into: dict[Any, list[int]], deltas: Mapping[Any, list[int]]) -> None:
    for grain, money in deltas.items():
        found = into.get(grain)
        if found is None:
            into[grain] = list(money)
        else:
            for index, amount in enumerate(money):
                found[index] += amount


# --- the queue -------------------------------------------------------------------------------------


@dataclass
class Pending:
    """One transaction level's queued deltas: money and calls."""

    money: Deltas = field(default_factory=dict)
    calls: CallDeltas = field(default_factory=dict)

    def merge(self, other: Pending) -> None:
        _merge(self.money, other.money)
        _merge(self.calls, other.calls)


def _level(session: Session) -> Pending:
    """The innermost level of the session's transaction queue."""
    connection = session.connection()
    if connection.engine not in _engines:
        raise LedgerError(
            "this engine does not queue the ledger's rollups: build it with make_engine"
        )
    stack = connection.info.get(_QUEUE)
    if not stack:
        # The transaction began before the queue saw it (its first statement autobegan it).
        stack = connection.info[_QUEUE] = [Pending()]
    return stack[-1]


def add_money(session: Session, deltas: Deltas) -> None:
    """Queue ``deltas`` on the session's transaction; written in key order just before COMMIT."""
    if deltas:
        _merge(_level(session).money, deltas)


def add_calls(session: Session, deltas: CallDeltas) -> None:
    """Queue call moves on the session's transaction; written in key order just before COMMIT,
    after the money."""
    if deltas:
        _merge(_level(session).calls, deltas)


def flush_money(session: Session) -> None:
    """Write everything queued on the session's connection now (both rollups), inside the current
    savepoint, for a transaction that reads the rollups back before it commits (verification,
    tests). The rows stay locked until the transaction ends, so the hot path never calls this."""
    stack = session.connection().info.get(_QUEUE)
    if stack:
        depth = len(stack)  # the savepoints stay open: one empty level each
        _write(session, _take(stack))
        stack.extend(Pending() for _ in range(depth))


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


def write_calls(connection: Connection | Session, deltas: CallDeltas) -> None:
    """One upsert for all call moves (ON CONFLICT (the key) DO UPDATE SET x = calls_daily.x +
    excluded.x), rows in key order."""
    if not deltas:
        return
    rows = [
        {**dict(zip(CALL_KEY, key, strict=True)), **dict(zip(CALL_COLUMNS, measures, strict=True))}
        for key, measures in sorted(deltas.items())
    ]
    bulk.insert(connection, calls_daily, rows, conflict=CALL_KEY, add=CALL_COLUMNS)


def _write(connection: Connection | Session, pending: Pending) -> None:
    """The lock order: money rows, then call rows, each in key order."""
    write_money(connection, pending.money)
    write_calls(connection, pending.calls)


def _take(stack: list[Pending]) -> Pending:
    """Every level's deltas merged into one, the stack left empty."""
    total = Pending()
    while stack:
        total.merge(stack.pop())
    return total


def _begin(connection: Connection) -> None:
    connection.info[_QUEUE] = [Pending()]


def _savepoint(connection: Connection, _name: Any) -> None:
    connection.info.setdefault(_QUEUE, [Pending()]).append(Pending())


def _release(connection: Connection, _name: Any, _context: Any) -> None:
    stack = connection.info.get(_QUEUE)
    if stack and len(stack) > 1:
        top = stack.pop()
        stack[-1].merge(top)


def _rollback_savepoint(connection: Connection, _name: Any, _context: Any) -> None:
    stack = connection.info.get(_QUEUE)
    if stack and len(stack) > 1:
        stack.pop()


def _commit(connection: Connection) -> None:
    stack = connection.info.pop(_QUEUE, None)
    if stack:
        _write(connection, _take(stack))


def _rollback(connection: Connection) -> None:
    connection.info.pop(_QUEUE, None)


def install(engine: Engine) -> None:
    """Queue the rollups on ``engine``'s connections (see the module docstring)."""
    if engine in _engines:
        return
    event.listen(engine, "begin", _begin)
    event.listen(engine, "savepoint", _savepoint)
    event.listen(engine, "release_savepoint", _release)
    event.listen(engine, "rollback_savepoint", _rollback_savepoint)
    event.listen(engine, "commit", _commit)
    event.listen(engine, "rollback", _rollback)
    _engines.add(engine)
