"""Drift percentiles per model: how far reported completion tokens are from the tiktoken estimate.

The value per call is the signed relative difference ``(reported - estimated) / estimated`` of
completion tokens, over settled calls with usage ``reported`` and a non-zero estimate (an estimated
call has no drift by definition). Positive means the provider reported more than we estimated.

Two methods, one definition (PostgreSQL's ``percentile_cont``: linear interpolation between the
values at ranks ``floor(p·(n-1))`` and ``ceil(p·(n-1))``):

* ``percentile_cont`` — PostgreSQL's ordered-set aggregate, one statement. The default there.
* ``window`` — portable SQL for SQLite, which has no percentile aggregate: ``row_number()`` and
  ``count()`` windows per model, then one aggregate picks the two neighbouring values of each
  percentile; only the final interpolation (three per model) happens in Python. Runs on PostgreSQL
  too, which is how the tests check that both give the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import Connection, Float, Integer, cast, func, literal, select
from sqlalchemy.sql import ColumnElement

from models import Reservation, UsageRecord
from worker.reports.model import PERCENTILES, Drift

reservations = Reservation.__table__
usage_records = UsageRecord.__table__

METHODS = ("percentile_cont", "window")


def default_method(dialect: str) -> str:
    return "percentile_cont" if dialect == "postgresql" else "window"


def _relative() -> ColumnElement[Any]:
    u = usage_records.c
    return cast(u.completion_tokens - u.estimate_completion_tokens, Float) / cast(
        u.estimate_completion_tokens, Float
    )


def _source(window: ColumnElement[bool]) -> Any:
    u = usage_records.c
    return (
        select(reservations.c.model.label("model"), _relative().label("rel"))
        .select_from(usage_records.join(reservations, reservations.c.id == u.reservation_id))
        .where(window, u.usage_source == "reported", u.estimate_completion_tokens > 0)
    )


def _percentile_cont(conn: Connection, window: ColumnElement[bool]) -> list[Drift]:
    calls = _source(window).subquery("drift")
    statement = (
        select(
            calls.c.model,
            func.count(),
            *(
                func.percentile_cont(fraction).within_group(calls.c.rel).label(name)
                for name, fraction in PERCENTILES
            ),
        )
        .group_by(calls.c.model)
        .order_by(calls.c.model)
    )
    return [
        Drift(str(model), int(n), *(round(float(v), 6) for v in values))
        for model, n, *values in conn.execute(statement).all()
    ]


def _floor(value: ColumnElement[Any], dialect: str) -> ColumnElement[Any]:
    """floor() of a non-negative number: PostgreSQL's CAST rounds, SQLite's truncates."""
    return cast(func.floor(value), Integer) if dialect == "postgresql" else cast(value, Integer)


def _window(conn: Connection, window: ColumnElement[bool]) -> list[Drift]:
    calls = _source(window).subquery("drift")
    ranked = select(
        calls.c.model,
        calls.c.rel,
        (func.row_number().over(partition_by=calls.c.model, order_by=calls.c.rel) - 1).label("i"),
        func.count().over(partition_by=calls.c.model).label("n"),
    ).subquery("ranked")
    picks = []
    for name, fraction in PERCENTILES:
        # floor(p·(n-1)) for n ≥ 1; the same float product Python uses below.
        low = _floor(literal(fraction, Float) * (ranked.c.n - 1), conn.dialect.name)
        picks.append(func.max(ranked.c.rel).filter(ranked.c.i == low).label(f"{name}_low"))
        picks.append(func.max(ranked.c.rel).filter(ranked.c.i == low + 1).label(f"{name}_high"))
    statement = (
        select(ranked.c.model, ranked.c.n, *picks)
        .group_by(ranked.c.model, ranked.c.n)
        .order_by(ranked.c.model)
    )
    found = []
    for row in conn.execute(statement).mappings():
        n = int(row["n"])
        values = []
        for name, fraction in PERCENTILES:
            position = fraction * (n - 1)
            low = float(row[f"{name}_low"])
            high = row[f"{name}_high"]
            share = position - math.floor(position)
            value = low if high is None or share == 0 else low + share * (float(high) - low)
            values.append(round(value, 6))
        found.append(Drift(str(row["model"]), n, *values))
    return found


def per_model(conn: Connection, window: ColumnElement[bool], method: str) -> tuple[Drift, ...]:
    if method not in METHODS:
        raise ValueError(f"unknown drift method {method!r}")
    if method == "percentile_cont":
        return tuple(_percentile_cont(conn, window))
    return tuple(_window(conn, window))
