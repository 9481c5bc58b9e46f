"""Both sides of the upstream reconciliation, read from the database (read-only).

* **Ledger**: the window's ``reservations`` (by ``created_at``, as every report section) LEFT JOIN
  ``call_routes``, ``usage_records`` and ``failures``, grouped in SQL by UTC day, provider (the
  route's, else the usage record's), model (the usage record's: the model billed, which is the one
  the upstream served when it substituted another, ``worker.core.substitution``; else the
  reservation's), upstream key, service tier (the usage record's, as the response reported it;
  none: the default tier) and outcome class; a few rows per grain.
* **Upstream**: ``upstream_usage`` and ``upstream_costs`` whose bucket starts in the window, grouped
  by day, provider, model, key, service tier and batch; each group is of one tier
  (``tiers.line_tier``) and priced at our prices at it (``matching.priced_upstream``), or unpriced
  with the reason, before the groups of a grain are summed. ``upstream_gaps``
  still open in the window are the exports known to be incomplete.

Names are then matched in Python (``matching.match_model``): a handful of distinct names per day.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, Date, case, cast, func, literal_column, select

from models import (
    CallRoute,
    Failure,
    Reservation,
    UpstreamCost,
    UpstreamGap,
    UpstreamUsage,
    UsageRecord,
)
from models.reservations import Status
from worker.core.prices import PriceBook
from worker.core.prices.book import normalize_tier
from worker.core.result import Usage
from worker.upstream.matching import (
    Gap,
    Grain,
    Ledger,
    Reconciliation,
    Upstream,
    match_model,
    match_provider,
    priced_upstream,
    reconcile,
    unpriced_upstream,
)
from worker.upstream.tiers import line_tier

_UTC = literal_column("INTERVAL '0'")
_FIRST_SIX = tuple(literal_column(str(position)) for position in range(1, 7))


def _day(column: Any, dialect: str) -> Any:
    if dialect == "postgresql":
        return cast(func.timezone(_UTC, column), Date)
    return func.date(column)  # SQLite keeps naive UTC text


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, date) else str(value)


def ledger_side(
    conn: Connection, since: datetime, until: datetime, book: PriceBook
) -> dict[Grain, Ledger]:
    r, route = Reservation.__table__, CallRoute.__table__
    u, f = UsageRecord.__table__, Failure.__table__
    dialect = conn.dialect.name
    billed_by_record = u.c.id.is_not(None)
    from_estimate = r.c.status == str(Status.SETTLED_FROM_ESTIMATE)
    cls = case(
        (billed_by_record, "billed"),
        (from_estimate, "estimate_charged"),
        (f.c.id.is_not(None), "unsettled"),
        (r.c.status == str(Status.VOIDED), "void"),
        else_="pending",
    )
    zero = literal_column("0")
    statement = (
        select(
            _day(r.c.created_at, dialect).label("day"),
            func.coalesce(route.c.provider, u.c.provider).label("route_provider"),
            func.coalesce(u.c.model, r.c.model).label("model"),
            func.coalesce(route.c.upstream_key, "").label("route_key"),
            func.coalesce(u.c.service_tier, "").label("tier"),
            cls.label("cls"),
            func.count().label("calls"),
            func.coalesce(
                func.sum(func.coalesce(u.c.prompt_tokens, f.c.estimate_prompt_tokens, zero)), 0
            ).label("input"),
            func.coalesce(
                func.sum(
                    func.coalesce(u.c.completion_tokens, f.c.estimate_completion_tokens, zero)
                ),
                0,
            ).label("output"),
            func.coalesce(
                func.sum(
                    func.coalesce(
                        u.c.charge_micros, case((from_estimate, f.c.exposure_micros), else_=zero)
                    )
                ),
                0,
            ).label("charged"),
            func.count(case((r.c.status == str(Status.UNSETTLED), 1))).label("open_calls"),
            func.coalesce(
                func.sum(
                    case((r.c.status == str(Status.UNSETTLED), f.c.exposure_micros), else_=zero)
                ),
                0,
            ).label("open_exposure"),
        )
        .select_from(
            r.outerjoin(route, route.c.request_id == r.c.request_id)
            .outerjoin(u, u.c.reservation_id == r.c.id)
            .outerjoin(f, f.c.reservation_id == r.c.id)
        )
        .where(r.c.created_at >= since, r.c.created_at < until)
        # By position: a label named like a column is ambiguous on SQLite, and PostgreSQL does not
        # take an expression with bound parameters as the same one in SELECT and GROUP BY.
        .group_by(*_FIRST_SIX)
    )
    found: dict[Grain, Ledger] = defaultdict(Ledger)
    for row in conn.execute(statement):
        day = _iso(row.day)
        grain = (
            day,
            match_provider(row.route_provider),
            match_model(book, row.model, date.fromisoformat(day)),
            row.route_key,
            normalize_tier(row.tier or None),
        )
        calls, tokens_in, tokens_out = int(row.calls), int(row.input), int(row.output)
        if row.cls in ("billed", "estimate_charged"):
            part = Ledger(
                calls=calls, billed_calls=calls, billed_input=tokens_in,
                billed_output=tokens_out, charged=int(row.charged),
            )  # fmt: skip
        elif row.cls == "unsettled":
            part = Ledger(
                calls=calls, unsettled_calls=calls, unsettled_input=tokens_in,
                unsettled_output=tokens_out, open_calls=int(row.open_calls),
                open_exposure=int(row.open_exposure),
            )  # fmt: skip
        elif row.cls == "void":
            part = Ledger(calls=calls, void_calls=calls)
        else:
            part = Ledger(calls=calls)
        found[grain] = found[grain] + part
    return dict(found)


def upstream_side(
    conn: Connection, since: datetime, until: datetime, book: PriceBook
) -> tuple[dict[Grain, Upstream], dict[tuple[str, str, str], int]]:
    t, c = UpstreamUsage.__table__, UpstreamCost.__table__
    dialect = conn.dialect.name
    key = case((t.c.api_key_id != "", t.c.api_key_id), else_=t.c.project_id)
    requests_known = func.count(t.c.requests) == func.count()
    usage = (
        select(
            _day(t.c.bucket_start, dialect).label("day"),
            t.c.provider,
            t.c.model,
            key.label("key"),
            t.c.service_tier,
            t.c.batch,
            case((requests_known, func.sum(t.c.requests)), else_=None).label("requests"),
            func.sum(t.c.input_tokens).label("input"),
            func.sum(t.c.cached_tokens).label("cached"),
            func.sum(t.c.cache_write_tokens).label("writes"),
            func.sum(t.c.cache_write_1h_tokens).label("writes_1h"),
            func.sum(t.c.output_tokens).label("output"),
        )
        .where(t.c.bucket_start >= since, t.c.bucket_start < until)
        .group_by("day", t.c.provider, t.c.model, "key", t.c.service_tier, t.c.batch)
    )
    found: dict[Grain, Upstream] = defaultdict(Upstream)
    for row in conn.execute(usage):
        day = _iso(row.day)
        on = date.fromisoformat(day)
        tier = line_tier(row.provider, row.service_tier, row.batch)
        provider = match_provider(row.provider)
        grain = (day, provider, match_model(book, row.model, on), row.key, tier.name)
        requests = None if row.requests is None else int(row.requests)
        counts = Usage(
            prompt_tokens=int(row.input), completion_tokens=int(row.output),
            cached_tokens=int(row.cached), cache_write_tokens=int(row.writes),
            cache_write_1h_tokens=int(row.writes_1h),
        )  # fmt: skip
        found[grain] = found[grain] + (
            unpriced_upstream(counts, requests, tier.unpriced)
            if tier.unpriced is not None
            else priced_upstream(book, provider, row.model, on, tier.name, counts, requests)
        )
    cost = (
        select(
            _day(c.c.bucket_start, dialect).label("day"),
            c.c.provider,
            c.c.model,
            func.sum(c.c.amount_micros).label("micros"),
        )
        .where(c.c.bucket_start >= since, c.c.bucket_start < until)
        .group_by("day", c.c.provider, c.c.model)
    )
    costs: dict[tuple[str, str, str], int] = defaultdict(int)
    for row in conn.execute(cost):
        day = _iso(row.day)
        model = match_model(book, row.model, date.fromisoformat(day)) if row.model else ""
        costs[(day, match_provider(row.provider), model)] += int(row.micros)
    return dict(found), dict(costs)


def open_gaps(conn: Connection, since: datetime, until: datetime) -> tuple[Gap, ...]:
    """The exports known to be incomplete in the window: a gap not closed by a later import."""
    g = UpstreamGap.__table__
    rows = conn.execute(
        select(g.c.provider, g.c.kind, g.c.after, g.c.source)
        .where(g.c.closed_at.is_(None), g.c.after < until)
        .order_by(g.c.provider, g.c.kind, g.c.after)
    )
    return tuple(Gap(r.provider, r.kind, r.after, r.source) for r in rows)


def reconciliation(
    conn: Connection, since: datetime, until: datetime, book: PriceBook
) -> Reconciliation:
    """Both sides over ``[since, until)`` (calls by creation, exports by bucket start), tied."""
    ledger = ledger_side(conn, since, until, book)
    upstream, costs = upstream_side(conn, since, until, book)
    found = reconcile(ledger, upstream, costs, book)
    return replace(found, incomplete=open_gaps(conn, since, until))
