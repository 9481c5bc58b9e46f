"""An oracle for the report that shares nothing with it but the schema: plain ``SELECT``s of the raw
rows (reservations, usage records, failures, transactions, entries, ledger accounts, anomalies) and
every figure counted and summed in Python.

Where the report groups and filters in SQL, picks the money rollup for whole days, computes the UTC
day in the database and chooses between two anomaly statements, this reads rows and does the
arithmetic by the figures' definitions (docs/reports.md): a call is in the window when its
reservation was created in ``[since, until)``; its day is the UTC date of that instant; money is read
from the ledger's entries alone, whatever the window (the rollup must equal the ledger).
``reference_report`` returns the group rows, the per-day series, the total and the anomalies.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, bindparam, text

from worker.reports.model import COUNT_FIELDS, MONEY_FIELDS, GroupRow, Tally
from worker.reports.spec import ReportSpec


@dataclass(frozen=True)
class _Call:
    id: int
    account: str
    model: str
    created_at: datetime
    status: str
    stream: bool
    reserved: int

    def value(self, key: str) -> str:
        if key == "day":
            return self.created_at.date().isoformat()
        return {"account": self.account, "model": self.model}[key]


def _utc(value: Any) -> datetime:
    """A stored instant as an aware UTC datetime: PostgreSQL returns one, SQLite returns text."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _rows(conn: Connection, sql: str, ids: Sequence[int] | None = None) -> list[Any]:
    """``sql``'s rows; with ``ids``, its ``:ids`` is the list (nothing to fetch when it is empty)."""
    if ids is None:
        return list(conn.execute(text(sql)).all())
    if not ids:
        return []
    statement = text(sql).bindparams(bindparam("ids", expanding=True))
    return list(conn.execute(statement, {"ids": list(ids)}).all())


def _window_calls(conn: Connection, spec: ReportSpec) -> dict[int, _Call]:
    since, until = spec.since.astimezone(UTC), spec.until.astimezone(UTC)
    found = {}
    for row in _rows(
        conn,
        "SELECT id, account_id, model, created_at, status, stream, reserved_micros"
        " FROM reservations",
    ):
        created = _utc(row.created_at)
        if since <= created < until:
            found[row.id] = _Call(
                row.id, str(row.account_id), str(row.model), created, str(row.status),
                bool(row.stream), int(row.reserved_micros),
            )  # fmt: skip
    return found


def _counts(conn: Connection, calls: dict[int, _Call]) -> dict[int, Counter[str]]:
    """Each call's count figures (0 or 1 each) and its still-held and open exposure amounts."""
    ids = list(calls)
    usage = {
        row.reservation_id: str(row.usage_source)
        for row in _rows(
            conn,
            "SELECT reservation_id, usage_source FROM usage_records WHERE reservation_id IN :ids",
            ids,
        )
    }
    per_call: dict[int, Counter[str]] = {}
    for call in calls.values():
        counts: Counter[str] = Counter(calls=1)
        counts["streamed" if call.stream else "non_streamed"] += 1
        if call.status == "settled":
            source = usage.get(call.id)
            counts["settled_estimated" if source == "estimated" else "settled_reported"] += 1
        elif call.status == "voided":
            counts["void"] += 1
        elif call.status == "held":
            counts["pending"] += 1
        if call.status in ("held", "unsettled"):
            counts["still_held"] += call.reserved
        per_call[call.id] = counts
    for row in _rows(
        conn,
        "SELECT reservation_id, reason, action, exposure_micros FROM failures"
        " WHERE reservation_id IN :ids",
        ids,
    ):
        counts = per_call[row.reservation_id]
        counts[f"unsettled_{row.reason}"] += 1
        if row.action is None:
            counts["exposure"] += int(row.exposure_micros or 0)
        else:
            counts[f"resolved_{row.action}"] += 1
    return per_call


def _money(conn: Connection, calls: dict[int, _Call]) -> dict[int, Counter[str]]:
    """Each call's held, charged, true-ups and released, from its ledger entries. A flagged
    ``charge`` is a call charged late, after its hold was resolved: its revenue is beyond the hold
    (a true-up, negative when it refunded an estimate), its credit to available no release."""
    account_kind = {
        row.id: str(row.kind) for row in _rows(conn, "SELECT id, kind FROM ledger_accounts")
    }
    transactions = {
        row.id: (row.reservation_id, "late_charge" if row.kind == "charge" and row.flagged
                 else str(row.kind))
        for row in _rows(
            conn,
            "SELECT id, reservation_id, kind, flagged FROM transactions"
            " WHERE reservation_id IN :ids",
            list(calls),
        )
    }  # fmt: skip
    per_call: dict[int, Counter[str]] = defaultdict(Counter)
    for row in _rows(
        conn,
        "SELECT transaction_id, ledger_account_id, amount, direction FROM entries"
        " WHERE transaction_id IN :ids",
        list(transactions),
    ):
        reservation_id, transaction_kind = transactions[row.transaction_id]
        kind, amount = account_kind[row.ledger_account_id], int(row.amount)
        credit = row.direction == "credit"
        money = per_call[reservation_id]
        if transaction_kind == "hold" and credit:
            money["held"] += amount
        if kind == "revenue":
            money["charged"] += amount if credit else -amount
            if transaction_kind == "true_up" and credit:
                money["true_ups"] += amount
            if transaction_kind == "late_charge":
                money["true_ups"] += amount if credit else -amount
        if kind == "available" and credit and transaction_kind != "late_charge":
            money["released"] += amount
    return per_call


def _anomalies(conn: Connection, calls: dict[int, _Call]) -> dict[str, int]:
    kinds = Counter(
        str(row.kind)
        for row in _rows(
            conn,
            "SELECT reservation_id, kind FROM anomalies WHERE reservation_id IN :ids",
            list(calls),
        )
    )
    return dict(sorted(kinds.items()))


def _rows_by(
    calls: Iterable[_Call], keys: tuple[str, ...], figures: dict[int, Counter[str]]
) -> tuple[GroupRow, ...]:
    summed: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
    for call in calls:
        summed[tuple(call.value(key) for key in keys)].update(figures[call.id])
    return tuple(
        GroupRow(key, Tally.of(_only(summed[key], COUNT_FIELDS), _only(summed[key], MONEY_FIELDS)))
        for key in sorted(summed)
    )


def _only(figures: Counter[str], names: tuple[str, ...]) -> dict[str, int]:
    return {name: figures[name] for name in names}


def reference_report(conn: Connection, spec: ReportSpec) -> dict[str, Any]:
    """Groups, days, total and anomalies of ``spec``'s window, from the raw rows."""
    calls = _window_calls(conn, spec)
    figures = _counts(conn, calls)
    for call_id, money in _money(conn, calls).items():
        figures[call_id].update(money)
    overall: Counter[str] = Counter()
    for counts in figures.values():
        overall.update(counts)
    return {
        "groups": _rows_by(calls.values(), spec.by, figures),
        "days": _rows_by(calls.values(), ("day",), figures),
        "total": Tally.of(_only(overall, COUNT_FIELDS), _only(overall, MONEY_FIELDS)),
        "anomalies": _anomalies(conn, calls),
    }
