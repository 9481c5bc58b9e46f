"""Parsing the window and the grouping keys (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker.reports.spec import ReportError, ReportSpec, parse_by, parse_spec, parse_time


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2025-03-01", datetime(2025, 3, 1, tzinfo=UTC)),
        ("2025-03-01T12:30:00Z", datetime(2025, 3, 1, 12, 30, tzinfo=UTC)),
        ("2025-03-01t12:30:00.250z", datetime(2025, 3, 1, 12, 30, 0, 250_000, tzinfo=UTC)),
        ("2025-03-01T14:30:00+02:00", datetime(2025, 3, 1, 12, 30, tzinfo=UTC)),
        ("2025-03-01 12:30Z", datetime(2025, 3, 1, 12, 30, tzinfo=UTC)),
    ],
)
def test_rfc3339_dates_and_timestamps_in_utc(text: str, want: datetime) -> None:
    got = parse_time(text, "since")
    assert got == want and got.tzinfo == UTC


@pytest.mark.parametrize("text", ["", "2025-3-1", "2025-03-01T12:00:00", "1700000000", "now"])
def test_refused_times(text: str) -> None:
    with pytest.raises(ReportError):
        parse_time(text, "since")


def test_grouping_keys() -> None:
    assert parse_by("day, account ,model") == ("day", "account", "model")
    assert parse_by("model,day") == ("model", "day")
    assert parse_by("") == ()
    with pytest.raises(ReportError, match="unknown --by key 'week'"):
        parse_by("week")


def test_window_must_be_forward() -> None:
    with pytest.raises(ReportError, match="must be before"):
        parse_spec("2025-03-02", "2025-03-01", "day")
    with pytest.raises(ReportError, match="aware"):
        ReportSpec(datetime(2025, 3, 1), datetime(2025, 3, 2, tzinfo=UTC))
