"""Drift percentiles: PostgreSQL's percentile_cont and the portable window method agree."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from reports.book import Call, percentile_cont, post
from worker.reports import drift
from worker.reports.query import window_clause
from worker.reports.spec import ReportSpec

SINCE = datetime(2034, 1, 1, tzinfo=UTC)


def _calls(model: str, n: int, seed: int) -> list[Call]:
    rng = random.Random(seed)
    return [
        Call(f"acct-{model}", model, SINCE + timedelta(minutes=i), "settled",
             completion=rng.randint(0, 400), estimate=rng.choice([0, *range(1, 300)]),
             request_id=f"drift-{model}-{i}")
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.parametrize("n", [1, 2, 7, 101])
def test_window_method_is_percentile_cont(session: Session, engine: Engine, n: int) -> None:
    model = f"drift-{uuid.uuid4().hex[:8]}"
    calls = _calls(model, n, seed=n)
    post(session, calls)
    spec = ReportSpec(SINCE, SINCE + timedelta(days=1), ())
    values = [(c.completion - c.estimate) / c.estimate for c in calls if c.estimate > 0]
    methods = ["window"] + (["percentile_cont"] if engine.dialect.name == "postgresql" else [])
    for method in methods:
        found = [d for d in drift.per_model(session.connection(), window_clause(spec), method)
                 if d.model == model]  # fmt: skip
        if not values:
            assert found == []
            continue
        (got,) = found
        assert got.calls == len(values)
        for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            assert getattr(got, name) == pytest.approx(
                round(percentile_cont(values, fraction), 6), abs=1e-6
            ), (method, name)


def test_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown drift method"):
        drift.per_model(None, None, "median-of-medians")  # type: ignore[arg-type]
