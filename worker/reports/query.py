"""The report's SQL: a few aggregate queries, GROUP BY in the database, one snapshot.

Shape (each one statement, portable between PostgreSQL and SQLite unless said):

1. calls — ``reservations`` LEFT JOIN (estimated ``usage_records`` only) LEFT JOIN ``failures``,
   every count and the still-held and exposure sums as ``FILTER`` aggregates.
2. money — ``entries`` ⋈ ``transactions`` ⋈ ``reservations`` ⋈ ``ledger_accounts``: held, charged,
   true-ups and released, straight from the ledger (the grain computed once per call, not per entry).
   The one ledger-side aggregate: the tie-out compares it with the reservations' statuses.
3. drift — percentiles per model of ``usage_records.drift_ppm``, from usage records alone
   (``worker.reports.drift``).
4. parity and 5. anomalies — only when their tables exist.

Queries 1 and 2 group by the report's keys plus ``day`` (the grain); group rows, the per-day chart
series and the total are sums of those aggregate rows, so they agree by construction and the table is
read once per query. A settled reservation always has exactly one usage record (the ledger writes both
in one transaction), so usage ``reported`` is settled minus ``estimated`` and query 1 joins only the
estimated records: the hash side stays small however many calls are settled.

The window is half-open on ``reservations.created_at``: money and exposure belong to the call's day,
whenever they moved. "Still held" and "exposure" are as of the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Connection, Date, cast, column, func, inspect, select, table, true
from sqlalchemy.sql import ColumnElement

from models import Entry, Failure, LedgerAccount, Reservation, Transaction, UsageRecord
from worker.reports import drift as drift_query
from worker.reports.model import (
    PARITY_FIELDS,
    REASONS,
    GroupRow,
    Parity,
    Report,
    Tally,
)
from worker.reports.spec import ReportSpec

reservations = Reservation.__table__
usage_records = UsageRecord.__table__
failures = Failure.__table__
transactions = Transaction.__table__
entries = Entry.__table__
ledger_accounts = LedgerAccount.__table__

# The other tables are read only when a migration has created them; named here, not imported, so
# this module does not depend on their models.
parity_pairs = table(
    "parity_pairs",
    column("streamed_reservation_id"),
    column("verdict"),
    column("mismatched"),
)
anomalies = table("anomalies", column("reservation_id"), column("kind"))

SECTIONS = ("calls", "money", "drift", "parity", "anomalies")
RESOLVE_ACTIONS = ("release", "charge_estimate", "settled_late")

Progress = Callable[[str], AbstractContextManager[Any]]


def _day(dialect: str) -> ColumnElement[Any]:
    created = reservations.c.created_at
    if dialect == "postgresql":
        return cast(func.timezone("UTC", created), Date)
    return func.date(created)  # SQLite keeps naive UTC text


def _dimension(key: str, dialect: str) -> ColumnElement[Any]:
    if key == "day":
        return _day(dialect)
    return {"account": reservations.c.account_id, "model": reservations.c.model}[key]


def grain(spec: ReportSpec) -> tuple[str, ...]:
    """The keys queries 1 and 2 group by: the report's keys, and ``day`` for the chart series."""
    return spec.by if "day" in spec.by else (*spec.by, "day")


def window_clause(spec: ReportSpec) -> ColumnElement[bool]:
    created = reservations.c.created_at
    return (created >= spec.since) & (created < spec.until)


def _key(row: Any, keys: tuple[str, ...]) -> tuple[str, ...]:
    """A grain row's key as text: PostgreSQL returns days as ``date``, SQLite as ISO text."""
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


def money_statement(spec: ReportSpec, dialect: str) -> Any:
    e, t, la = entries, transactions, ledger_accounts
    keys = grain(spec)
    # The window's calls with their grain, computed once per call rather than once per entry.
    calls = (
        select(reservations.c.id, *(_dimension(key, dialect).label(key) for key in keys))
        .where(window_clause(spec))
        .subquery("calls")
    )
    credit = e.c.direction == "credit"
    dims = [calls.c[key] for key in keys]
    measures = [
        func.sum(e.c.amount).filter(t.c.kind == "hold", credit).label("held"),
        func.sum(e.c.amount).filter(la.c.kind == "revenue", credit).label("revenue_in"),
        func.sum(e.c.amount).filter(la.c.kind == "revenue", ~credit).label("revenue_out"),
        func.sum(e.c.amount).filter(t.c.kind == "true_up", la.c.kind == "revenue", credit)
        .label("true_ups"),
        func.sum(e.c.amount).filter(la.c.kind == "available", credit).label("released"),
    ]  # fmt: skip
    return (
        select(*dims, *measures)
        .select_from(
            e.join(t, t.c.id == e.c.transaction_id)
            .join(calls, calls.c.id == t.c.reservation_id)
            .join(la, la.c.id == e.c.ledger_account_id)
        )
        .group_by(*dims)
    )


def _calls(conn: Connection, spec: ReportSpec) -> dict[tuple[str, ...], dict[str, int]]:
    keys = grain(spec)
    found = {}
    for row in conn.execute(calls_statement(spec, conn.dialect.name)).mappings():
        values = {name: int(row[name] or 0) for name in row if name not in keys}
        values["settled_reported"] = values.pop("settled") - values["settled_estimated"]
        values["non_streamed"] = values["calls"] - values["streamed"]
        found[_key(row, keys)] = values
    return found


def _money(conn: Connection, spec: ReportSpec) -> dict[tuple[str, ...], dict[str, int]]:
    keys = grain(spec)
    found = {}
    for row in conn.execute(money_statement(spec, conn.dialect.name)).mappings():
        found[_key(row, keys)] = {
            "held": int(row["held"] or 0),
            # Revenue's balance: credits in, minus any debit out (none today; kept exact anyway).
            "charged": int(row["revenue_in"] or 0) - int(row["revenue_out"] or 0),
            "true_ups": int(row["true_ups"] or 0),
            "released": int(row["released"] or 0),
        }
    return found


def _roll_up(
    grains: dict[tuple[str, ...], Tally], positions: tuple[int, ...]
) -> tuple[GroupRow, ...]:
    rolled: dict[tuple[str, ...], Tally] = {}
    for key, tally in grains.items():
        projected = tuple(key[i] for i in positions)
        rolled[projected] = rolled[projected] + tally if projected in rolled else tally
    return tuple(GroupRow(key, rolled[key]) for key in sorted(rolled))


def parity(conn: Connection, spec: ReportSpec) -> Parity:
    p = parity_pairs
    delimited = "," + p.c.mismatched + ","
    statement = (
        select(
            func.count().label("pairs"),
            func.count().filter(p.c.verdict == "match").label("matches"),
            func.count().filter(p.c.verdict == "mismatch").label("mismatches"),
            *(
                func.count().filter(delimited.like(f"%,{name},%")).label(name)
                for name in PARITY_FIELDS
            ),
        )
        .select_from(p.join(reservations, reservations.c.id == p.c.streamed_reservation_id))
        .where(window_clause(spec))
    )
    row = conn.execute(statement).mappings().one()
    return Parity(
        pairs=int(row["pairs"]),
        matches=int(row["matches"] or 0),
        mismatches=int(row["mismatches"] or 0),
        mismatched_fields={name: int(row[name] or 0) for name in PARITY_FIELDS},
    )


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


def build_report(
    conn: Connection,
    spec: ReportSpec,
    *,
    progress: Progress | None = None,
    now: datetime | None = None,
    drift_method: str | None = None,
) -> Report:
    """Run the report's queries on ``conn`` (in the caller's transaction) and assemble the model.

    ``progress(section)`` is entered around each section's query. Read-only; the caller owns the
    transaction and should give it one snapshot (``worker.reports.snapshot``) so the sections agree.
    """
    step = progress or (lambda _section: nullcontext())
    present = set(inspect(conn).get_table_names())
    with step("calls"):
        calls = _calls(conn, spec)
    with step("money"):
        money = _money(conn, spec)
    grains = {
        key: Tally.of(counts, {**money.get(key, {}), **counts}) for key, counts in calls.items()
    }
    keys = grain(spec)
    groups = _roll_up(grains, tuple(range(len(spec.by))))
    days = _roll_up(grains, (keys.index("day"),))
    method = drift_method or drift_query.default_method(conn.dialect.name)
    with step("drift"):
        drift = drift_query.per_model(conn, spec, method)
    found_parity = None
    if "parity_pairs" in present:
        with step("parity"):
            found_parity = parity(conn, spec)
    found_anomalies = None
    if "anomalies" in present:
        with step("anomalies"):
            found_anomalies = anomaly_counts(conn, spec)
    overall = Tally()
    for row in days:
        overall = overall + row.tally
    return Report(
        since=spec.since,
        until=spec.until,
        generated_at=(now or datetime.now(UTC)).astimezone(UTC),
        by=spec.by,
        groups=groups,
        days=days,
        total=overall,
        drift=drift,
        drift_method=method,
        parity=found_parity,
        anomalies=found_anomalies,
    )
