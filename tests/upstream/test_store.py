"""Importing exports on both engines: idempotent per natural key, a changed figure replaced with an
audit row, one file holding the same row twice refused."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import UpstreamCost, UpstreamRevision, UpstreamUsage
from worker.upstream.exports import Export, ExportError, read_export
from worker.upstream.store import import_export

FIXTURES = Path(__file__).parent.parent / "fixtures" / "upstream"
NOW = datetime(2026, 12, 3, tzinfo=UTC)


def export(name: str, provider: str = "openai") -> Export:
    return read_export(provider, (FIXTURES / name).read_bytes(), name)


def counts(session: Session, sources: tuple[str, ...]) -> tuple[int, int, int]:
    """Rows last imported from ``sources`` (the database is shared with tests that commit)."""
    return tuple(  # type: ignore[return-value]
        session.scalar(select(func.count()).select_from(t).where(t.source.in_(sources)))
        for t in (UpstreamUsage, UpstreamCost, UpstreamRevision)
    )


def test_importing_again_changes_nothing(session: Session) -> None:
    usage, costs = export("openai_usage_completions.json"), export("openai_costs.json")
    claude = export("anthropic_messages_usage.json", "anthropic")
    first = [import_export(session, e, "a", NOW) for e in (usage, costs, claude)]
    assert [(s.added, s.unchanged, s.replaced) for s in first] == [(2, 0, 0), (3, 0, 0), (1, 0, 0)]
    assert first[1].rounded == 2
    rows = session.scalars(select(UpstreamUsage).where(UpstreamUsage.source == "a")).all()
    snapshot = [(r.model, r.input_tokens, r.requests, r.imported_at) for r in rows]
    again = [import_export(session, e, "b", NOW.replace(hour=1)) for e in (usage, costs, claude)]
    assert [(s.added, s.unchanged, s.replaced) for s in again] == [(0, 2, 0), (0, 3, 0), (0, 1, 0)]
    session.expire_all()
    rows = session.scalars(select(UpstreamUsage).where(UpstreamUsage.source == "a")).all()
    assert [(r.model, r.input_tokens, r.requests, r.imported_at) for r in rows] == snapshot
    assert counts(session, ("a", "b")) == (3, 3, 0)  # unchanged rows keep their source
    cost = session.scalars(select(UpstreamCost).where(UpstreamCost.amount_micros == 12_346)).one()
    assert str(cost.amount) == "0.0123456789"  # the exact amount is kept beside the rounded one


def test_a_changed_figure_replaces_the_row_and_keeps_the_old_one(session: Session) -> None:
    usage = export("openai_usage_completions.json")
    import_export(session, usage, "monday.json", NOW)
    grown = Export((replace(usage.usage[0], output_tokens=1007), *usage.usage[1:]))
    stats = import_export(session, grown, "tuesday.json", NOW)
    assert (stats.added, stats.unchanged, stats.replaced) == (0, 1, 1)
    row = session.scalars(select(UpstreamUsage).where(UpstreamUsage.api_key_id == "key_abc")).one()
    assert (row.output_tokens, row.source) == (1007, "tuesday.json")
    revision = session.scalars(
        select(UpstreamRevision).where(UpstreamRevision.source == "tuesday.json")
    ).one()
    assert (revision.kind, revision.row_id, revision.source) == ("usage", row.id, "tuesday.json")
    assert orjson.loads(revision.before)["output_tokens"] == 1000
    assert orjson.loads(revision.after)["output_tokens"] == 1007
    assert counts(session, ("monday.json", "tuesday.json")) == (2, 0, 1)
    # monday's download imported again after tuesday's: older (every total lower or equal), skipped
    stats = import_export(session, usage, "monday.json", NOW)
    assert (stats.stale, stats.replaced) == (2, 0)
    session.expire_all()
    assert session.get(UpstreamUsage, row.id).output_tokens == 1007


def test_one_file_with_a_row_twice_and_other_figures_is_refused(session: Session) -> None:
    usage = export("openai_usage_completions.json")
    twice = Export((usage.usage[0], replace(usage.usage[0], requests=6)))
    with pytest.raises(
        ExportError,
        match=r"twice\.json: a usage row appears twice with other figures: bucket_start=",
    ):
        import_export(session, twice, "twice.json", NOW)
    same = Export((usage.usage[0], usage.usage[0]))
    assert import_export(session, same, "same.json", NOW).added == 1
