"""The report's SQL: a few aggregate queries, GROUP BY in the database, one snapshot (on PostgreSQL
drift and providers may run on a second connection of that snapshot, beside calls: ``build_report``'s
``side``).

Shape (each one statement, portable between PostgreSQL and SQLite unless said):

1. calls — for a window of whole UTC days a scan of ``calls_daily`` (``models.rollup.CallsDaily``),
   every call counted in the row of its state, grouped by the grain, status, usage source, failure
   reason and resolution; otherwise exact, two statements: ``reservations`` LEFT JOIN (estimated
   ``usage_records`` only) grouped by the grain and the status (count, streamed, reserved,
   estimated; the per-status figures are read off the groups), and the window's ``failures`` ⋈ their
   reservations grouped by grain, reason and resolution (the unsettled and resolved counts, the open
   exposure). ``verify_calls`` compares the rollup with ``reservations ⟕ usage_records ⟕ failures``
   per key, ``rebuild_calls`` recomputes it from them.
2. money — held, charged, true-ups and released. For a window of whole UTC days (``whole_days``) a
   scan of ``money_daily`` (``models.rollup``), the per (day, account, model) sums the ledger's
   writers keep in the transaction that posts the money; otherwise — a window with a time of day
   splits a day the rollup keeps whole — exact from the ledger, ``entries`` ⋈ ``transactions`` ⋈
   ``reservations`` ⋈ ``ledger_accounts`` (the grain computed once per call, not per entry). Either
   way the ledger-side aggregate: the tie-out compares it with the reservations' statuses.
   ``verify_money`` compares the two per (day, account, model); ``rebuild_money`` recomputes the
   rollup from the ledger (``billing report --verify-ledger`` / ``--rebuild-rollup``).
3. drift — percentiles per model of ``usage_records.drift_ppm``, from usage records alone
   (``worker.reports.drift``); on PostgreSQL in model ranges that parallel workers take one each,
   the ranges cut where ``calls_daily`` says the streamed settled calls split evenly.
3b. providers — from ``calls_daily`` for whole UTC days, else from ``usage_records``
   (``worker.reports.providers``).
4. parity and 5. anomalies. Anomalies are all anomalies minus those
   of the calls outside the window when those are the fewer (``ix_reservations_created_at``), else
   joined to the window's calls; both exact. With them, the unpriced components: the window's
   failures of reason ``unpriced_component`` ⋈ their reservations ⟕ their ``unpriced_component``
   anomaly, counted per model and the usage fields the anomaly's detail names.

Queries 1 and 2 group by the report's keys plus ``day`` (the grain); group rows, the per-day chart
series and the total are sums of those aggregate rows, so they agree by construction and the table is
read once per query. A settled reservation always has exactly one usage record (the ledger writes both
in one transaction), so usage ``reported`` is settled minus ``estimated`` and query 1 joins only the
estimated records: the hash side stays small however many calls are settled.

The window is half-open on ``reservations.created_at``: money and exposure belong to the call's day,
whenever they moved. "Still held" and "exposure" are as of the snapshot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    Date,
    and_,
    case,
    cast,
    func,
    insert,
    literal_column,
    not_,
    or_,
    select,
    true,
    union_all,
)
from sqlalchemy.sql import ColumnElement

from models import (
    CALL_COLUMNS,
    MONEY_COLUMNS,
    Anomaly,
    CallsDaily,
    Entry,
    Failure,
    LedgerAccount,
    MoneyDaily,
    ParityPair,
    Reservation,
    Transaction,
    UsageRecord,
)
from worker.core.result import Reason
from worker.core.usage import unpriced_field_names
from worker.ledger.calibration import latest_rows as latest_calibration
from worker.reports import drift as drift_query
from worker.reports import providers as providers_query
from worker.reports.model import (
    PARITY_FIELDS,
    REASONS,
    Calibration,
    Drift,
    GroupRow,
    Parity,
    ProviderUsage,
    Report,
    Tally,
    UnpricedComponent,
)
from worker.reports.spec import ReportError, ReportSpec
from worker.upstream import query as upstream_query

if TYPE_CHECKING:  # an annotation only: the price book is --upstream's
    from worker.core.prices import PriceBook

reservations = Reservation.__table__
usage_records = UsageRecord.__table__
failures = Failure.__table__
transactions = Transaction.__table__
entries = Entry.__table__
ledger_accounts = LedgerAccount.__table__
money_daily = MoneyDaily.__table__
calls_daily = CallsDaily.__table__
parity_pairs = ParityPair.__table__
anomalies = Anomaly.__table__

SECTIONS = ("calls", "money", "drift", "parity", "anomalies")
RESOLVE_ACTIONS = ("release", "charge_estimate", "settled_late")

Progress = Callable[[str], AbstractContextManager[Any]]
# Opens a second connection in the report's snapshot (``worker.reports.exported``).
Side = Callable[[], AbstractContextManager[Connection]]


# ``timezone(INTERVAL '0', t)``: the UTC wall-clock time of ``t`` by arithmetic. The same value as
# ``timezone('UTC', t)``, which looks the zone up by name for every row.
# Migration 0005's statistics are on exactly this expression: the planner knows there are few days.
_UTC = literal_column("INTERVAL '0'")


def _day(dialect: str) -> ColumnElement[Any]:
    created = reservations.c.created_at
    if dialect == "postgresql":
        return cast(func.timezone(_UTC, created), Date)
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
    """The calls pass: one row per grain key and reservation status, over every call in the window.

    Counts, streamed, the reserved sum (still held is that of the held and unsettled rows) and the
    estimated usage records (a hash of a few rows) — four aggregates a row; the statuses are a group
    key, not a FILTER each. Failures are joined by ``failures_statement``, to the few calls that have
    one, instead of probing every call here."""
    r = reservations
    estimated = (
        select(usage_records.c.reservation_id)
        .where(usage_records.c.usage_source == "estimated")
        .subquery("estimated")
    )
    dims = [_dimension(key, dialect).label(key) for key in grain(spec)]
    return (
        select(
            *dims,
            r.c.status.label("status"),
            func.count().label("calls"),
            func.count().filter(r.c.stream == true()).label("streamed"),
            func.sum(r.c.reserved_micros).label("reserved"),
            func.count(estimated.c.reservation_id).label("settled_estimated"),
        )
        .select_from(r.outerjoin(estimated, estimated.c.reservation_id == r.c.id))
        .where(window_clause(spec))
        .group_by(*dims, r.c.status)
    )


def failures_statement(spec: ReportSpec, dialect: str) -> Any:
    """The window's failures per grain key, reason and resolution: count, and open exposure.

    ``failures`` ⋈ ``reservations`` (for the window and the grain): on PostgreSQL a lookup of each
    failure's reservation by primary key (``random_page_cost`` in ``PG_SETTINGS``), not a pass over
    every call."""
    f, r = failures, reservations
    dims = [_dimension(key, dialect).label(key) for key in grain(spec)]
    return (
        select(
            *dims,
            f.c.reason.label("reason"),
            f.c.action.label("action"),
            func.count().label("n"),
            func.sum(f.c.exposure_micros).filter(f.c.action.is_(None)).label("exposure"),
        )
        .select_from(f.join(r, r.c.id == f.c.reservation_id))
        .where(window_clause(spec))
        .group_by(*dims, f.c.reason, f.c.action)
    )


def whole_days(spec: ReportSpec) -> bool:
    """True when the window starts and ends at midnight UTC: money can come from ``money_daily``."""
    return all(moment.astimezone(UTC).time() == time(0) for moment in (spec.since, spec.until))


def ledger_money_statement(
    keys: tuple[str, ...], dialect: str, spec: ReportSpec | None = None
) -> Any:
    """Money per ``keys`` straight from the ledger: entries ⋈ transactions ⋈ reservations ⋈
    ledger_accounts, over ``spec``'s window (every call without one). Exact for any window; what
    ``money_daily`` must equal (``verify_money``) and what rebuilds it."""
    e, t, la = entries, transactions, ledger_accounts
    # The window's calls with their grain, computed once per call rather than once per entry.
    calls = select(reservations.c.id, *(_dimension(key, dialect).label(key) for key in keys))
    if spec is not None:
        calls = calls.where(window_clause(spec))
    window = calls.subquery("calls")
    credit = e.c.direction == "credit"
    signed = case((credit, e.c.amount), else_=-e.c.amount)
    # A call charged late, after its hold was resolved (``legs.late_charge``): beyond the hold
    # either way, as ``rollup.money_deltas`` counts it.
    late = and_(t.c.kind == "charge", t.c.flagged)
    dims = [window.c[key] for key in keys]
    measures = [
        func.sum(e.c.amount).filter(t.c.kind == "hold", credit).label("held"),
        # Revenue's balance: credits in, minus any debit out (a late charge's refund).
        func.sum(signed).filter(la.c.kind == "revenue").label("charged"),
        func.sum(signed).filter(
            la.c.kind == "revenue", or_(and_(t.c.kind == "true_up", credit), late)
        ).label("true_ups"),
        func.sum(e.c.amount).filter(la.c.kind == "available", credit, not_(late))
        .label("released"),
    ]  # fmt: skip
    return (
        select(*dims, *measures)
        .select_from(
            e.join(t, t.c.id == e.c.transaction_id)
            .join(window, window.c.id == t.c.reservation_id)
            .join(la, la.c.id == e.c.ledger_account_id)
        )
        .group_by(*dims)
    )


ROLLUP_KEYS = {"day": "day", "account": "account_id", "model": "model"}


def rollup_money_statement(keys: tuple[str, ...], spec: ReportSpec | None = None) -> Any:
    """Money per ``keys`` from ``money_daily``: a scan of a few rows per day and account and model.
    Only for whole UTC days (``whole_days``): the rollup knows a call's day, not its time."""
    m = money_daily
    dims = [m.c[ROLLUP_KEYS[key]].label(key) for key in keys]
    statement = select(*dims, *(func.sum(m.c[name]).label(name) for name in MONEY_COLUMNS))
    if spec is not None:
        since, until = (moment.astimezone(UTC).date() for moment in (spec.since, spec.until))
        statement = statement.where(m.c.day >= since, m.c.day < until)
    return statement.group_by(*dims)


def money_statement(spec: ReportSpec, dialect: str) -> Any:
    """The report's money query: from ``money_daily`` for a window of whole UTC days, else exact
    from the ledger (a window with a time of day splits a day the rollup keeps whole)."""
    if whole_days(spec):
        return rollup_money_statement(grain(spec), spec)
    return ledger_money_statement(grain(spec), dialect, spec)


STILL_HELD = ("held", "unsettled")  # the statuses whose reservation is still held
CALL_FIGURES = (
    "calls",
    "streamed",
    "settled",
    "settled_estimated",
    *(f"unsettled_{reason}" for reason in REASONS),
    *(f"resolved_{action}" for action in RESOLVE_ACTIONS),
    "void",
    "pending",
    "still_held",
    "exposure",
)


def _calls(conn: Connection, spec: ReportSpec) -> dict[tuple[str, ...], dict[str, int]]:
    """Per grain key, every count of the calls section and the still-held and exposure sums:
    from ``calls_daily`` for whole UTC days, else exact."""
    if whole_days(spec):
        return _rolled_calls(conn, spec)
    return _exact_calls(conn, spec)


def rollup_calls_statement(spec: ReportSpec) -> Any:
    """The calls section from ``calls_daily``: per grain key and the state the section tells apart
    (status, usage source, failure reason and resolution), the sums of the rows."""
    c = calls_daily.c
    since, until = (moment.astimezone(UTC).date() for moment in (spec.since, spec.until))
    dims = [c[ROLLUP_KEYS[key]].label(key) for key in grain(spec)]
    state = [c.status, c.usage_source, c.reason, c.action]
    return (
        select(*dims, *state, *(func.sum(c[name]).label(name) for name in
                                ("calls", "streamed", "reserved", "exposure")))
        .where(c.day >= since, c.day < until)
        .group_by(*dims, *state)
    )  # fmt: skip


def _rolled_calls(conn: Connection, spec: ReportSpec) -> dict[tuple[str, ...], dict[str, int]]:
    """``_exact_calls``'s figures from ``calls_daily``: the same definitions, read off each state."""
    keys = grain(spec)
    found: dict[tuple[str, ...], dict[str, int]] = {}
    for row in conn.execute(rollup_calls_statement(spec)).mappings():
        n = int(row["calls"])
        if n == 0:
            continue  # every call of this state moved on: not a call of the window
        values = found.setdefault(_key(row, keys), dict.fromkeys(CALL_FIGURES, 0))
        status, reason, action = row["status"], row["reason"], row["action"]
        _count_calls(values, status, n, int(row["streamed"]), int(row["reserved"]))
        if row["usage_source"] == "estimated":
            values["settled_estimated"] += n
        if reason:
            if reason not in REASONS:  # a reason with no column would drop calls silently
                raise ValueError(f"failure reason {reason!r} has no report column")
            values[f"unsettled_{reason}"] += n
            if action in RESOLVE_ACTIONS:
                values[f"resolved_{action}"] += n
            if not action:
                values["exposure"] += int(row["exposure"])
    for values in found.values():
        values["settled_reported"] = values.pop("settled") - values["settled_estimated"]
        values["non_streamed"] = values["calls"] - values["streamed"]
    return found


def _count_calls(values: dict[str, int], status: str, n: int, streamed: int, reserved: int) -> None:
    """Add ``n`` calls in ``status`` (``streamed`` of them streamed, ``reserved`` their holds) to a
    key's figures: the one mapping of statuses to the report's columns, for both paths."""
    values["calls"] += n
    values["streamed"] += streamed
    if status == "settled":
        values["settled"] += n
    elif status == "voided":
        values["void"] += n
    elif status == "held":
        values["pending"] += n
    if status in STILL_HELD:
        values["still_held"] += reserved


def _exact_calls(conn: Connection, spec: ReportSpec) -> dict[tuple[str, ...], dict[str, int]]:
    keys = grain(spec)
    dialect = conn.dialect.name
    found: dict[tuple[str, ...], dict[str, int]] = {}
    for row in conn.execute(calls_statement(spec, dialect)).mappings():
        values = found.setdefault(_key(row, keys), dict.fromkeys(CALL_FIGURES, 0))
        n, status = int(row["calls"]), row["status"]
        _count_calls(values, status, n, int(row["streamed"]), int(row["reserved"] or 0))
        values["settled_estimated"] += int(row["settled_estimated"])
    for row in conn.execute(failures_statement(spec, dialect)).mappings():
        # Every failure's call is in the calls pass (same window, same snapshot).
        values = found.setdefault(_key(row, keys), dict.fromkeys(CALL_FIGURES, 0))
        n = int(row["n"])
        if row["reason"] not in REASONS:  # a reason with no column would drop calls silently
            raise ValueError(f"failure reason {row['reason']!r} has no report column")
        values[f"unsettled_{row['reason']}"] += n
        if row["action"] in RESOLVE_ACTIONS:
            values[f"resolved_{row['action']}"] += n
        values["exposure"] += int(row["exposure"] or 0)
    for values in found.values():
        values["settled_reported"] = values.pop("settled") - values["settled_estimated"]
        values["non_streamed"] = values["calls"] - values["streamed"]
    return found


def _money_rows(
    conn: Connection, statement: Any, keys: tuple[str, ...]
) -> dict[tuple[str, ...], dict[str, int]]:
    return {
        _key(row, keys): {name: int(row[name] or 0) for name in MONEY_COLUMNS}
        for row in conn.execute(statement).mappings()
    }


def _money(conn: Connection, spec: ReportSpec) -> dict[tuple[str, ...], dict[str, int]]:
    return _money_rows(conn, money_statement(spec, conn.dialect.name), grain(spec))


# --- the rollup against the ledger -----------------------------------------------------------------

FULL_KEYS = ("day", "account", "model")


@dataclass(frozen=True)
class MoneyDifference:
    """A key where a rollup and the ledger disagree (missing rows are 0): a (day, account, model) of
    ``money_daily``, or a row of ``calls_daily`` (``table``)."""

    key: tuple[str, ...]
    rollup: dict[str, int]
    ledger: dict[str, int]
    table: str = "money_daily"


def verify_money(
    conn: Connection, spec: ReportSpec | None = None
) -> tuple[int, list[MoneyDifference]]:
    """Compare ``money_daily`` with the ledger join per (day, account, model), over ``spec``'s whole
    days or everything; returns (keys compared, differences). Read-only."""
    if spec is not None and not whole_days(spec):
        raise ReportError("verifying the money rollup needs a window of whole UTC days")
    dialect = conn.dialect.name
    rollup = _money_rows(conn, rollup_money_statement(FULL_KEYS, spec), FULL_KEYS)
    ledger = _money_rows(conn, ledger_money_statement(FULL_KEYS, dialect, spec), FULL_KEYS)
    zero = dict.fromkeys(MONEY_COLUMNS, 0)
    differences = [
        MoneyDifference(key, rollup.get(key, zero), ledger.get(key, zero))
        for key in sorted(set(rollup) | set(ledger))
        if rollup.get(key, zero) != ledger.get(key, zero)
    ]
    return len(set(rollup) | set(ledger)), differences


def rebuild_money(conn: Connection) -> int:
    """Recompute ``money_daily`` from the ledger in the caller's transaction; returns its rows.

    On PostgreSQL the table is locked EXCLUSIVE first: a writer that already added to it is waited
    for (its entries are then committed and seen), and a writer that adds later waits for this
    transaction and adds its delta on top of the rebuilt row. Safe while workers run.
    """
    dialect = conn.dialect.name
    if dialect == "postgresql":
        conn.exec_driver_sql("LOCK TABLE money_daily IN EXCLUSIVE MODE")
    conn.execute(money_daily.delete())
    source = ledger_money_statement(FULL_KEYS, dialect)
    conn.execute(
        insert(money_daily).from_select(
            ["day", "account_id", "model", *MONEY_COLUMNS],
            select(*(func.coalesce(c, 0) if c.name in MONEY_COLUMNS else c
                     for c in source.subquery().c)),
        )
    )  # fmt: skip
    return int(conn.execute(select(func.count()).select_from(money_daily)).scalar_one())


CALL_KEYS = ("day", "account_id", "model", "status", "usage_source", "provider", "usage_shape",
             "reason", "action")  # fmt: skip


def exact_calls_statement(dialect: str, spec: ReportSpec | None = None) -> Any:
    """``calls_daily``'s rows straight from the calls: ``reservations ⟕ usage_records ⟕ failures``
    grouped by the rollup's key ('' for what a call has none of), over ``spec``'s window (every
    call without one). What ``calls_daily`` must equal (``verify_calls``) and what rebuilds it;
    the same placement as ``worker.ledger.rollup.call_key`` and ``call_measures``."""
    r, u, f = reservations, usage_records, failures
    none = literal_column("''")
    keys = [
        _day(dialect).label("day"), r.c.account_id, r.c.model, r.c.status,
        *(func.coalesce(column, none).label(column.name)
          for column in (u.c.usage_source, u.c.provider, u.c.usage_shape, f.c.reason, f.c.action)),
    ]  # fmt: skip
    costed = u.c.provider_cost_micros.is_not(None)
    measures = [
        func.count().label("calls"),
        func.count().filter(r.c.stream == true()).label("streamed"),
        func.sum(r.c.reserved_micros).label("reserved"),
        func.coalesce(func.sum(u.c.charge_micros), 0).label("charged"),
        func.count(u.c.provider_cost_micros).label("costed_calls"),
        func.coalesce(func.sum(u.c.charge_micros).filter(costed), 0).label("charged_costed"),
        func.coalesce(func.sum(u.c.provider_cost_micros), 0).label("provider_cost"),
        func.coalesce(func.sum(f.c.exposure_micros), 0).label("exposure"),
    ]
    statement = select(*keys, *measures).select_from(
        r.outerjoin(u, u.c.reservation_id == r.c.id).outerjoin(f, f.c.reservation_id == r.c.id)
    )
    if spec is not None:
        statement = statement.where(window_clause(spec))
    return statement.group_by(*keys)


def _call_rows(conn: Connection, statement: Any) -> dict[tuple[str, ...], dict[str, int]]:
    """Rows by key; a row whose every measure is 0 (its calls all moved on) is no row."""
    found = {}
    for row in conn.execute(statement).mappings():
        measures = {name: int(row[name] or 0) for name in CALL_COLUMNS}
        if any(measures.values()):
            found[_key(row, CALL_KEYS)] = measures
    return found


def verify_calls(
    conn: Connection, spec: ReportSpec | None = None
) -> tuple[int, list[MoneyDifference]]:
    """Compare ``calls_daily`` with the calls per key, over ``spec``'s whole days or everything;
    returns (keys compared, differences). Read-only."""
    if spec is not None and not whole_days(spec):
        raise ReportError("verifying the call rollup needs a window of whole UTC days")
    c = calls_daily.c
    rolled = select(*(c[key] for key in CALL_KEYS), *(c[name] for name in CALL_COLUMNS))
    if spec is not None:
        since, until = (moment.astimezone(UTC).date() for moment in (spec.since, spec.until))
        rolled = rolled.where(c.day >= since, c.day < until)
    rollup = _call_rows(conn, rolled)
    exact = _call_rows(conn, exact_calls_statement(conn.dialect.name, spec))
    zero = dict.fromkeys(CALL_COLUMNS, 0)
    differences = [
        MoneyDifference(key, rollup.get(key, zero), exact.get(key, zero), "calls_daily")
        for key in sorted(set(rollup) | set(exact))
        if rollup.get(key, zero) != exact.get(key, zero)
    ]
    return len(set(rollup) | set(exact)), differences


def rebuild_calls(conn: Connection) -> int:
    """Recompute ``calls_daily`` from the calls in the caller's transaction; returns its rows.
    Locked as ``rebuild_money`` locks ``money_daily`` (safe while workers run)."""
    dialect = conn.dialect.name
    if dialect == "postgresql":
        conn.exec_driver_sql("LOCK TABLE calls_daily IN EXCLUSIVE MODE")
    conn.execute(calls_daily.delete())
    conn.execute(
        insert(calls_daily).from_select([*CALL_KEYS, *CALL_COLUMNS], exact_calls_statement(dialect))
    )
    return int(conn.execute(select(func.count()).select_from(calls_daily)).scalar_one())


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


def outside_clause(spec: ReportSpec) -> ColumnElement[bool]:
    """The calls outside the window: two ranges of ``ix_reservations_created_at``."""
    created = reservations.c.created_at
    return (created < spec.since) | (created >= spec.until)


def anomaly_direct_statement(spec: ReportSpec) -> Any:
    """Anomalies per kind of the window's calls: ``anomalies`` ⋈ the window's reservations."""
    a = anomalies
    return (
        select(a.c.kind, func.count().label("n"))
        .select_from(a.join(reservations, reservations.c.id == a.c.reservation_id))
        .where(window_clause(spec))
        .group_by(a.c.kind)
        .order_by(a.c.kind)
    )


def anomaly_complement_statement(spec: ReportSpec) -> Any:
    """The same figures as every anomaly per kind minus those of the calls outside the window.

    Every anomaly belongs to a reservation (a foreign key, enforced on both engines), which is either
    in the window or outside it, so the difference is exact; it reads the anomalies and the calls
    outside the window (``ix_reservations_created_at``), not the calls inside it."""
    a = anomalies
    everything = select(a.c.kind, func.count().label("n")).group_by(a.c.kind)
    outside = (
        select(a.c.kind, (-func.count()).label("n"))
        .select_from(a.join(reservations, reservations.c.id == a.c.reservation_id))
        .where(outside_clause(spec))
        .group_by(a.c.kind)
    )
    both = union_all(everything, outside).subquery("counted")
    n = func.sum(both.c.n)
    return (
        select(both.c.kind, n.label("n")).group_by(both.c.kind).having(n > 0).order_by(both.c.kind)
    )


def fewer_outside(conn: Connection, spec: ReportSpec, inside: int) -> bool:
    """Whether fewer calls lie outside the window than the ``inside`` calls in it; counts at most
    ``inside`` of them (an index range), so it costs no more than the direct join would read."""
    created = reservations.c.created_at  # the index alone: an index-only scan
    outside = select(created).where(outside_clause(spec)).limit(inside).subquery()
    counted = conn.execute(select(func.count()).select_from(outside)).scalar_one()
    return int(counted) < inside


def anomaly_counts(conn: Connection, spec: ReportSpec, inside: int | None = None) -> dict[str, int]:
    """Anomalies per kind of the window's calls; ``inside`` is how many calls the window holds
    (the calls section's total), which picks the cheaper of two exact statements."""
    use_complement = inside is not None and fewer_outside(conn, spec, inside)
    statement = (
        anomaly_complement_statement(spec) if use_complement else anomaly_direct_statement(spec)
    )
    return {str(kind): int(n) for kind, n in conn.execute(statement).all()}


# The field a call unsettled ``unpriced_component`` is counted under when its anomaly names none.
UNNAMED_FIELD = "(not named)"


def unpriced_statement(spec: ReportSpec) -> Any:
    """The window's failures of reason ``unpriced_component`` per model and the detail of their
    ``unpriced_component`` anomaly (the fields and values ``worker.core.usage`` named): a few rows, these
    calls being few (``failures`` ⋈ ``reservations`` by primary key, as ``failures_statement``)."""
    f, r, a = failures, reservations, anomalies
    reason = str(Reason.UNPRICED_COMPONENT)
    joined = f.join(r, r.c.id == f.c.reservation_id).outerjoin(
        a, (a.c.reservation_id == f.c.reservation_id) & (a.c.kind == reason)
    )
    return (
        select(r.c.model, a.c.detail, func.count().label("n"))
        .select_from(joined)
        .where(window_clause(spec), f.c.reason == reason)
        .group_by(r.c.model, a.c.detail)
    )


def unpriced_components(conn: Connection, spec: ReportSpec) -> tuple[UnpricedComponent, ...]:
    """Calls unsettled ``unpriced_component`` per model and usage field, ordered by both: which
    price to add. A call is counted under each field its anomaly names (``UNNAMED_FIELD`` when it
    names none), so the rows of a model may add up to more than its calls."""
    counted: Counter[tuple[str, str]] = Counter()
    for model, detail, n in conn.execute(unpriced_statement(spec)).all():
        for field in unpriced_field_names(detail) or (UNNAMED_FIELD,):
            counted[(str(model), field)] += int(n)
    return tuple(
        UnpricedComponent(model, field, calls) for (model, field), calls in sorted(counted.items())
    )


DRIFT_RANGES = 3  # the report's process and PostgreSQL's default two parallel workers


def drift_bounds(conn: Connection, spec: ReportSpec, ranges: int = DRIFT_RANGES) -> tuple[str, ...]:
    """Model names that cut the drift section into ``ranges`` model ranges of about as many calls
    with a drift each (streamed settled calls with reported usage in ``calls_daily``, over the days
    the window touches): a weight only, so a stale rollup slows the section but cannot change it.
    Nothing on SQLite, or when there are too few models to cut."""
    if conn.dialect.name != "postgresql":
        return ()
    c = calls_daily.c
    since = spec.since.astimezone(UTC).date()
    weight = func.sum(c.streamed)
    statement = (
        select(c.model, weight)
        .where(c.day >= since, c.day <= spec.until.astimezone(UTC).date())
        .where(c.status == "settled", c.usage_source == "reported")
        .group_by(c.model)
        .having(weight > 0)
        .order_by(c.model)
    )
    weights = [(str(model), int(n)) for model, n in conn.execute(statement).all()]
    total = sum(n for _, n in weights)
    bounds: list[str] = []
    running = 0
    for model, n in weights:
        if running >= total * (len(bounds) + 1) / ranges and len(bounds) < ranges - 1:
            bounds.append(model)  # this model starts the next range
        running += n
    return tuple(bounds)


def calibration(conn: Connection) -> tuple[Calibration, ...]:
    """The latest calibration version of every (provider, model) (``worker.ledger.calibration``)."""
    fields = [name for name in Calibration.__dataclass_fields__]
    return tuple(
        Calibration(**{name: getattr(row, name) for name in fields})
        for row in latest_calibration(conn)
    )


def build_report(
    conn: Connection,
    spec: ReportSpec,
    *,
    progress: Progress | None = None,
    now: datetime | None = None,
    drift_method: str | None = None,
    side: Side | None = None,
    upstream_book: PriceBook | None = None,
) -> Report:
    """Run the report's queries on ``conn`` (in the caller's transaction) and assemble the model.

    The database must be at the migrations' head (``run_report`` checks it): every section reads
    its table unconditionally.

    ``progress(section)`` is entered around each section's query. Read-only; the caller owns the
    transaction and should give it one snapshot (``worker.reports.snapshot``) so the sections agree.
    With ``side`` (a second connection of that snapshot, ``worker.reports.exported``) the sections
    that read only ``usage_records`` (drift, then providers) run there, in a thread, while calls,
    money, parity and anomalies run on ``conn``: the same figures, the report's time the longer of
    the two instead of their sum. With ``upstream_book`` the upstream
    reconciliation runs too (``worker.upstream.query``), its model names matched by that book.
    """
    step = progress or (lambda _section: nullcontext())
    method = drift_method or drift_query.default_method(conn.dialect.name)

    rolled = whole_days(spec)

    def beside_on(other: Connection) -> tuple[tuple[Drift, ...], tuple[ProviderUsage, ...]]:
        with step("drift"):
            bounds = drift_bounds(other, spec) if method == "percentile_cont" else ()
            found_drift = drift_query.per_model(other, spec, method, bounds)
        with step("providers"):
            return found_drift, providers_query.per_provider(other, spec, rolled=rolled)

    def beside(opened: Side) -> tuple[tuple[Drift, ...], tuple[ProviderUsage, ...]]:
        with opened() as other:
            return beside_on(other)

    with ThreadPoolExecutor(max_workers=1) as pool:  # leaving waits for the side, even on an error
        pending = None if side is None else pool.submit(beside, side)
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
        with step("parity"):
            found_parity = parity(conn, spec)
        inside = sum(counts["calls"] for counts in calls.values())
        with step("anomalies"):
            found_anomalies = anomaly_counts(conn, spec, inside)
            found_unpriced = unpriced_components(conn, spec)
        drift, found_providers = beside_on(conn) if pending is None else pending.result()
    with step("calibration"):
        found_calibration = calibration(conn)
    found_upstream = None
    if upstream_book is not None:
        with step("upstream"):
            found_upstream = upstream_query.reconciliation(
                conn, spec.since, spec.until, upstream_book
            )
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
        providers=found_providers,
        upstream=found_upstream,
        unpriced_components=found_unpriced,
        calibration=found_calibration,
    )
