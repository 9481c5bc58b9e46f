"""Overlapping imports on both engines (issue 37): buckets of another width over the same time are
refused, another grouping of one bucket replaces it (never summed), an incomplete export is
recorded until a later import holds what was missing."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import UpstreamGap, UpstreamUsage
from worker.upstream.exports import ExportError, read_export
from worker.upstream.store import import_export

NOW = datetime(2026, 12, 7, tzinfo=UTC)
DAY = int(datetime(2031, 5, 1, tzinfo=UTC).timestamp())


def _page(start: int, width: int, rows: list[dict], has_more: bool = False) -> bytes:
    return orjson.dumps({
        "object": "page", "has_more": has_more, "next_page": "next" if has_more else None,
        "data": [{"object": "bucket", "start_time": start, "end_time": start + width,
                  "results": [{"object": "organization.usage.completions.result",
                               "num_model_requests": 1, "output_tokens": 0, "model": "gpt-4o",
                               **row} for row in rows]}],
    })  # fmt: skip


def _input(session: Session) -> int:
    t = UpstreamUsage
    return session.scalar(
        select(func.coalesce(func.sum(t.input_tokens), 0)).where(
            t.provider == "openai", t.bucket_start >= datetime(2031, 5, 1, tzinfo=UTC),
            t.bucket_start < datetime(2031, 5, 2, tzinfo=UTC),
        )
    )  # fmt: skip


def test_a_daily_export_over_hourly_ones_is_refused_not_summed(session: Session) -> None:
    hourly = read_export("openai", _page(DAY, 3600, [{"input_tokens": 10}]), "hour.json")
    import_export(session, hourly, "hour.json", NOW)
    daily = read_export("openai", _page(DAY, 86400, [{"input_tokens": 240}]), "day.json")
    with pytest.raises(
        ExportError,
        match=r"^day\.json: the usage bucket .* overlaps the bucket .* imported from hour\.json",
    ):
        import_export(session, daily, "day.json", NOW)
    assert _input(session) == 10


def test_another_grouping_of_a_bucket_replaces_it(session: Session) -> None:
    by_key = _page(DAY, 86400, [{"input_tokens": 30, "api_key_id": "key_a"},
                                {"input_tokens": 70, "api_key_id": "key_b"}])  # fmt: skip
    import_export(session, read_export("openai", by_key, "a.json"), "a.json", NOW)
    by_model = _page(DAY, 86400, [{"input_tokens": 100, "num_model_requests": 2}])
    stats = import_export(session, read_export("openai", by_model, "b.json"), "b.json", NOW)
    assert (stats.added, stats.removed) == (1, 2)
    assert _input(session) == 100  # not 200


def test_an_incomplete_export_is_recorded_until_its_next_page_is_imported(
    session: Session,
) -> None:
    first = read_export("openai", _page(DAY, 86400, [{"input_tokens": 5}], has_more=True), "p1")
    import_export(session, first, "p1", NOW)
    import_export(session, first, "p1", NOW)  # again: one gap, not two
    open_gaps = select(UpstreamGap.after).where(
        UpstreamGap.provider == "openai", UpstreamGap.closed_at.is_(None),
        UpstreamGap.after == datetime(2031, 5, 2, tzinfo=UTC),
    )  # fmt: skip
    assert session.scalars(open_gaps).all() == [datetime(2031, 5, 2, tzinfo=UTC)]
    second = read_export("openai", _page(DAY + 86400, 86400, [{"input_tokens": 6}]), "p2")
    import_export(session, second, "p2", NOW)
    assert session.scalars(open_gaps).all() == []
