"""Drift percentiles per model: how far reported completion tokens are from the tiktoken estimate.

One definition, the worker's (``worker.ledger.findings.settled_drift``), read from
``usage_records.drift_ppm``: for a settled *streamed* call with *reported* usage and a non-zero
estimate, ``(visible - estimated) / estimated`` in parts per million, truncated toward zero, where
visible = completion minus reasoning tokens (reasoning is never streamed, so the estimate cannot see
it). The drift alert's medians read the same column, so the report and the alert agree. Positive means
the provider reported more than we estimated. Percentiles are taken over the integer ppm values and
shown as fractions (ppm / 10^6, six decimals: exactly the resolution of the stored value).

The usage record carries its call's model and creation time (``model``, ``requested_at``), so this is
one scan of one table, and the percentiles sort only the drift subset.

Two methods, one definition (PostgreSQL's ``percentile_cont``: linear interpolation between the
values at ranks ``floor(p·(n-1))`` and ``ceil(p·(n-1))``):

* ``percentile_cont`` — PostgreSQL's ordered-set aggregate, one statement. The default there. An
  ordered-set aggregate cannot be split between parallel workers, so with ``bounds`` (model names,
  ascending) the statement is a UNION ALL of the same aggregate over consecutive model ranges of
  ``ix_usage_records_drift``, which PostgreSQL runs as a Parallel Append, one range per process:
  every model lies in exactly one range, so the figures are the same.
* ``window`` — portable SQL for SQLite, which has no percentile aggregate: ``row_number()`` and
  ``count()`` windows per model, then one aggregate picks the two neighbouring values of each
  percentile; only the final interpolation (three per model) happens in Python. Runs on PostgreSQL
  too, which is how the tests check that both give the same numbers.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Float, Integer, cast, func, literal, select, union_all
from sqlalchemy.sql import ColumnElement

from models import UsageRecord
from worker.reports.model import PERCENTILES, Drift
from worker.reports.spec import ReportSpec

usage_records = UsageRecord.__table__

METHODS = ("percentile_cont", "window")
PPM = 1_000_000


def default_method(dialect: str) -> str:
    return "percentile_cont" if dialect == "postgresql" else "window"


def _fraction(ppm: float) -> float:
    return round(ppm / PPM, 6)


def source(spec: ReportSpec) -> Any:
    """(model, ppm) of every call in the window that has a drift."""
    u = usage_records.c
    return select(u.model.label("model"), u.drift_ppm.label("ppm")).where(
        u.drift_ppm.is_not(None), u.requested_at >= spec.since, u.requested_at < spec.until
    )


def percentile_cont_statement(spec: ReportSpec, bounds: Sequence[str] = ()) -> Any:
    if bounds:
        edges = [None, *bounds, None]
        parts = [_percentile_cont_part(spec, low, high) for low, high in itertools.pairwise(edges)]
        return union_all(*parts).subquery("ranges").select().order_by("model")
    return _percentile_cont_part(spec, None, None).order_by("model")


def _percentile_cont_part(spec: ReportSpec, low: str | None, high: str | None) -> Any:
    """The percentiles of the models in [low, high) (None: unbounded)."""
    selected = source(spec)
    if low is not None:
        selected = selected.where(usage_records.c.model >= low)
    if high is not None:
        selected = selected.where(usage_records.c.model < high)
    calls = selected.subquery("drift")
    return select(
        calls.c.model,
        func.count().label("n"),
        *(
            func.percentile_cont(fraction).within_group(calls.c.ppm).label(name)
            for name, fraction in PERCENTILES
        ),
    ).group_by(calls.c.model)


def _percentile_cont(conn: Connection, spec: ReportSpec, bounds: Sequence[str]) -> list[Drift]:
    return [
        Drift(str(model), int(n), *(_fraction(float(v)) for v in values))
        for model, n, *values in conn.execute(percentile_cont_statement(spec, bounds)).all()
    ]


def _floor(value: ColumnElement[Any], dialect: str) -> ColumnElement[Any]:
    """floor() of a non-negative number: PostgreSQL's CAST rounds, SQLite's truncates."""
    return cast(func.floor(value), Integer) if dialect == "postgresql" else cast(value, Integer)


def window_statement(spec: ReportSpec, dialect: str) -> Any:
    calls = source(spec).subquery("drift")
    ranked = select(
        calls.c.model,
        calls.c.ppm,
        (func.row_number().over(partition_by=calls.c.model, order_by=calls.c.ppm) - 1).label("i"),
        func.count().over(partition_by=calls.c.model).label("n"),
    ).subquery("ranked")
    picks = []
    for name, fraction in PERCENTILES:
        # floor(p·(n-1)) for n ≥ 1; the same float product Python uses below.
        low = _floor(literal(fraction, Float) * (ranked.c.n - 1), dialect)
        picks.append(func.max(ranked.c.ppm).filter(ranked.c.i == low).label(f"{name}_low"))
        picks.append(func.max(ranked.c.ppm).filter(ranked.c.i == low + 1).label(f"{name}_high"))
    return (
        select(ranked.c.model, ranked.c.n, *picks)
        .group_by(ranked.c.model, ranked.c.n)
        .order_by(ranked.c.model)
    )


def _window(conn: Connection, spec: ReportSpec) -> list[Drift]:
    found = []
    for row in conn.execute(window_statement(spec, conn.dialect.name)).mappings():
        n = int(row["n"])
        values = []
        for name, fraction in PERCENTILES:
            position = fraction * (n - 1)
            low = float(row[f"{name}_low"])
            high = row[f"{name}_high"]
            share = position - math.floor(position)
            value = low if high is None or share == 0 else low + share * (float(high) - low)
            values.append(_fraction(value))
        found.append(Drift(str(row["model"]), n, *values))
    return found


def per_model(
    conn: Connection, spec: ReportSpec, method: str, bounds: Sequence[str] = ()
) -> tuple[Drift, ...]:
    """Percentiles per model, ordered by model; ``bounds`` split ``percentile_cont`` into model
    ranges (see the module docstring), which changes its speed, never its figures."""
    if method not in METHODS:
        raise ValueError(f"unknown drift method {method!r}")
    if method == "percentile_cont":
        return tuple(_percentile_cont(conn, spec, bounds))
    return tuple(_window(conn, spec))
