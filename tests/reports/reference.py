"""The report's statements as they were before the calls pass was split (``report-speed``), kept as the
oracle the faster ones must equal: one LEFT JOIN of every call to its estimated usage record and its
failure with a FILTER aggregate per figure, the day as ``timezone('UTC', …)``, the money of a partial
window from the ledger join with that day, and anomalies joined to the window's reservations.

``reference_report`` assembles them as ``build_report`` does (grain rows, then the group rows, the
per-day series and the total as sums of them), so a test compares whole reports.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from sqlalchemy import Connection, Date, case, cast, func, select, true
from sqlalchemy.sql import ColumnElement

from models import MONEY_COLUMNS
from worker.reports.model import REASONS, GroupRow, Tally
from worker.reports.query import (
    RESOLVE_ACTIONS,
    anomalies,
    entries,
    failures,
    grain,
    ledger_accounts,
    money_statement,
    reservations,
    transactions,
    usage_records,
    whole_days,
    window_clause,
)
from worker.reports.spec import ReportSpec


def _day(dialect: str) -> ColumnElement[Any]:
    created = reservations.c.created_at
    if dialect == "postgresql":
        return cast(func.timezone("UTC", created), Date)
    return func.date(created)


def _dimension(key: str, dialect: str) -> ColumnElement[Any]:
    if key == "day":
        return _day(dialect)
    return {"account": reservations.c.account_id, "model": reservations.c.model}[key]


def _key(row: Any, keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(
        row[key].isoformat() if isinstance(row[key], date) else str(row[key]) for key in keys
    )


def calls_statement(spec: ReportSpec, dialect: str) -> Any:
    r, f = reservations, failures
    estimated = (
        select(usage_records.c.reservation_id)
        .where(usage_records.c.usage_source == "estimated")
        .subquery("estimated")
    )
    count = func.count
    dims = [_dimension(key, dialect).label(key) for key in grain(spec)]
    measures = [
        count().label("calls"),
        count().filter(r.c.stream == true()).label("streamed"),
        count().filter(r.c.status == "settled").label("settled"),
        count(estimated.c.reservation_id).label("settled_estimated"),
        *(count().filter(f.c.reason == reason).label(f"unsettled_{reason}") for reason in REASONS),
        *(
            count().filter(f.c.action == action).label(f"resolved_{action}")
            for action in RESOLVE_ACTIONS
        ),
        count().filter(r.c.status == "voided").label("void"),
        count().filter(r.c.status == "held").label("pending"),
        func.sum(r.c.reserved_micros)
        .filter(r.c.status.in_(("held", "unsettled")))
        .label("still_held"),
        func.sum(f.c.exposure_micros).filter(f.c.action.is_(None)).label("exposure"),
    ]
    return (
        select(*dims, *measures)
        .select_from(
            r.outerjoin(estimated, estimated.c.reservation_id == r.c.id).outerjoin(
                f, f.c.reservation_id == r.c.id
            )
        )
        .where(window_clause(spec))
        .group_by(*dims)
    )


def calls(conn: Connection, spec: ReportSpec) -> dict[tuple[str, ...], dict[str, int]]:
    keys = grain(spec)
    found = {}
    for row in conn.execute(calls_statement(spec, conn.dialect.name)).mappings():
        values = {name: int(row[name] or 0) for name in row if name not in keys}
        values["settled_reported"] = values.pop("settled") - values["settled_estimated"]
        values["non_streamed"] = values["calls"] - values["streamed"]
        found[_key(row, keys)] = values
    return found


def ledger_money_statement(keys: tuple[str, ...], dialect: str, spec: ReportSpec) -> Any:
    e, t, la = entries, transactions, ledger_accounts
    calls = select(reservations.c.id, *(_dimension(key, dialect).label(key) for key in keys))
    window = calls.where(window_clause(spec)).subquery("calls")
    credit = e.c.direction == "credit"
    measures = [
        func.sum(e.c.amount).filter(t.c.kind == "hold", credit).label("held"),
        func.sum(case((credit, e.c.amount), else_=-e.c.amount)).filter(la.c.kind == "revenue")
        .label("charged"),
        func.sum(e.c.amount).filter(t.c.kind == "true_up", la.c.kind == "revenue", credit)
        .label("true_ups"),
        func.sum(e.c.amount).filter(la.c.kind == "available", credit).label("released"),
    ]  # fmt: skip
    dims = [window.c[key] for key in keys]
    return (
        select(*dims, *measures)
        .select_from(
            e.join(t, t.c.id == e.c.transaction_id)
            .join(window, window.c.id == t.c.reservation_id)
            .join(la, la.c.id == e.c.ledger_account_id)
        )
        .group_by(*dims)
    )


def money(conn: Connection, spec: ReportSpec) -> dict[tuple[str, ...], dict[str, int]]:
    keys = grain(spec)
    if whole_days(spec):  # the rollup's path, which this branch does not change
        statement = money_statement(spec, conn.dialect.name)
    else:
        statement = ledger_money_statement(keys, conn.dialect.name, spec)
    return {
        _key(row, keys): {name: int(row[name] or 0) for name in MONEY_COLUMNS}
        for row in conn.execute(statement).mappings()
    }


def anomaly_counts(conn: Connection, spec: ReportSpec) -> dict[str, int]:
    a = anomalies
    statement = (
        select(a.c.kind, func.count())
        .select_from(a.join(reservations, reservations.c.id == a.c.reservation_id))
        .where(window_clause(spec))
        .group_by(a.c.kind)
        .order_by(a.c.kind)
    )
    return {str(kind): int(n) for kind, n in conn.execute(statement).all()}


def _roll_up(
    grains: dict[tuple[str, ...], Tally], positions: tuple[int, ...]
) -> tuple[GroupRow, ...]:
    rolled: dict[tuple[str, ...], Tally] = {}
    for key, tally in grains.items():
        projected = tuple(key[i] for i in positions)
        rolled[projected] = rolled[projected] + tally if projected in rolled else tally
    return tuple(GroupRow(key, rolled[key]) for key in sorted(rolled))


def reference_report(conn: Connection, spec: ReportSpec) -> dict[str, Any]:
    """Groups, days, total and anomalies, as the report computed them before."""
    counted = calls(conn, spec)
    found_money = money(conn, spec)
    grains = {
        key: Tally.of(counts, {**found_money.get(key, {}), **counts})
        for key, counts in counted.items()
    }
    keys = grain(spec)
    days = _roll_up(grains, (keys.index("day"),))
    overall = Tally()
    for row in days:
        overall = overall + row.tally
    return {
        "groups": _roll_up(grains, tuple(range(len(spec.by)))),
        "days": days,
        "total": overall,
        "anomalies": anomaly_counts(conn, spec),
    }
