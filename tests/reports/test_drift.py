"""Drift percentiles: PostgreSQL's percentile_cont and the portable window method agree, on the
worker's one definition (``drift_ppm``: streamed, reported, visible tokens)."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from models import UsageRecord
from reports.book import Call, drift_of, drift_percentile, post
from worker.reports import drift
from worker.reports.spec import ReportSpec

SINCE = datetime(2034, 1, 1, tzinfo=UTC)


def _calls(model: str, n: int, seed: int) -> list[Call]:
    rng = random.Random(seed)
    calls = []
    for i in range(n):
        completion = rng.randint(0, 400)
        calls.append(
            Call(f"acct-{model}", model, SINCE + timedelta(minutes=i), "settled",
                 completion=completion, reasoning=rng.choice([0, 0, rng.randint(0, completion)]),
                 estimate=rng.choice([0, *range(1, 300)]), stream=rng.random() < 0.8,
                 source=rng.choice(["reported"] * 5 + ["estimated"]),
                 request_id=f"drift-{model}-{i}")
        )  # fmt: skip
    return calls


@pytest.mark.parametrize("n", [1, 2, 7, 101])
def test_window_method_is_percentile_cont(session: Session, engine: Engine, n: int) -> None:
    model = f"drift-{uuid.uuid4().hex[:8]}"
    calls = _calls(model, n, seed=n)
    post(session, calls)
    spec = ReportSpec(SINCE, SINCE + timedelta(days=1), ())
    values = [ppm for c in calls if (ppm := drift_of(c)) is not None]
    methods = ["window"] + (["percentile_cont"] if engine.dialect.name == "postgresql" else [])
    for method in methods:
        found = [d for d in drift.per_model(session.connection(), spec, method) if d.model == model]
        if not values:
            assert found == []
            continue
        (got,) = found
        assert got.calls == len(values)
        for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            assert getattr(got, name) == pytest.approx(
                drift_percentile(values, fraction), abs=1e-6
            ), (method, name)


def test_usage_records_carry_the_call_and_its_drift(session: Session) -> None:
    """What the report reads instead of joining reservations: the call's model and creation time,
    and the drift of the plan (an independent computation) or none."""
    model = f"drift-{uuid.uuid4().hex[:8]}"
    calls = _calls(model, 40, seed=40)
    post(session, calls)
    u = UsageRecord.__table__.c
    rows = {
        row.requested_at: row
        for row in session.execute(
            select(u.model, u.requested_at, u.drift_ppm).where(u.model == model)
        )
    }
    assert len(rows) == len(calls)
    for call in calls:
        row = rows[call.created_at]
        assert row.model == call.model
        assert row.drift_ppm == drift_of(call)


def test_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown drift method"):
        drift.per_model(None, None, "median-of-medians")  # type: ignore[arg-type]
