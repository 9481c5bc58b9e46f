"""The report's provider section: per provider and usage shape, the calls settled from reported
usage, what we charged, and the cross-check against the cost the provider reported itself.

For a window of whole UTC days a scan of the few ``calls_daily`` rows of settled calls (every call's
usage record counted there with its provider, shape and source: ``rolled_statement``); otherwise one
scan of ``usage_records`` in the window (``requested_at``, as the drift section; the same instant as
the reservation's ``created_at``, copied from the same request). A call the
gateway did not name a provider for is counted under ``unknown``; a usage record without a shape (an
estimate, or a record written before the shapes were kept) under ``estimated`` or ``unrecorded``.
The cross-check compares, over the calls whose provider sent a cost, our charge with theirs:
``drift`` = (ours - theirs) / theirs, the measure the ``provider_cost_drift`` anomaly applies per call.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from sqlalchemy import Connection, case, func, select

from models import CallsDaily, UsageRecord
from worker.core.money import Micros
from worker.reports.model import ProviderUsage
from worker.reports.spec import ReportSpec

UNKNOWN_PROVIDER = "unknown"


def rolled_statement(spec: ReportSpec) -> Any:
    """``statement``'s inner groups from ``calls_daily``: its rows of calls with a usage record,
    '' read back as NULL."""
    c = CallsDaily.__table__.c
    since, until = (moment.astimezone(UTC).date() for moment in (spec.since, spec.until))
    provider, shape = func.nullif(c.provider, ""), func.nullif(c.usage_shape, "")
    return (
        select(
            provider.label("provider"),
            shape.label("usage_shape"),
            c.usage_source,
            func.sum(c.calls).label("calls"),
            func.sum(c.charged).label("charged"),
            func.sum(c.costed_calls).label("costed_calls"),
            func.sum(c.charged_costed).label("charged_costed"),
            func.sum(c.provider_cost).label("provider_cost"),
        )
        .where(c.day >= since, c.day < until, c.usage_source != "")
        .group_by(provider, shape, c.usage_source)
        .having(func.sum(c.calls) > 0)
        .subquery("grouped")
    )


def statement(spec: ReportSpec, *, rolled: bool = False) -> Any:
    """Two levels: the window's usage records grouped by their own columns (provider, shape,
    source: few, and known to be few, so PostgreSQL aggregates in parallel — migration 0012's
    statistics), then those few groups named (``unknown``, ``estimated``, ``unrecorded``) and
    merged. Naming every record before grouping costs an expression per row. ``rolled``: the inner
    groups from ``calls_daily`` (whole UTC days only)."""
    u = UsageRecord.__table__
    costed = u.c.provider_cost_micros.is_not(None)
    grouped = (
        select(
            u.c.provider,
            u.c.usage_shape,
            u.c.usage_source,
            func.count().label("calls"),
            func.sum(u.c.charge_micros).label("charged"),
            func.count(u.c.provider_cost_micros).label("costed_calls"),
            func.sum(u.c.charge_micros).filter(costed).label("charged_costed"),
            func.sum(u.c.provider_cost_micros).label("provider_cost"),
        )
        .where(u.c.requested_at >= spec.since, u.c.requested_at < spec.until)
        .group_by(u.c.provider, u.c.usage_shape, u.c.usage_source)
        .subquery("grouped")
    )
    if rolled:
        grouped = rolled_statement(spec)
    g = grouped.c
    shape = func.coalesce(
        g.usage_shape, case((g.usage_source == "estimated", "estimated"), else_="unrecorded")
    )
    return (
        select(
            func.coalesce(g.provider, UNKNOWN_PROVIDER).label("provider"),
            shape.label("shape"),
            func.sum(g.calls).label("calls"),
            func.coalesce(func.sum(g.charged), 0).label("charged"),
            func.sum(g.costed_calls).label("costed_calls"),
            func.coalesce(func.sum(g.charged_costed), 0).label("charged_costed"),
            func.coalesce(func.sum(g.provider_cost), 0).label("provider_cost"),
        )
        .group_by("provider", "shape")
        .order_by("provider", "shape")
    )


def per_provider(
    conn: Connection, spec: ReportSpec, *, rolled: bool = False
) -> tuple[ProviderUsage, ...]:
    """Per provider and usage shape, ordered by both (``statement``)."""
    return tuple(
        ProviderUsage(
            provider=row.provider,
            usage_shape=row.shape,
            calls=int(row.calls),
            charged=Micros(int(row.charged)),
            costed_calls=int(row.costed_calls),
            charged_costed=Micros(int(row.charged_costed)),
            provider_cost=Micros(int(row.provider_cost)),
        )
        for row in conn.execute(statement(spec, rolled=rolled))
    )
