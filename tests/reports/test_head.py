"""``billing report`` reads every table the migrations create, so it refuses a database that is not
at head — behind it (``billing db upgrade``) or ahead of it (a newer release migrated it) — with one
clear line, on both engines, instead of a missing-table error from deep inside a query."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import create_pg_database, drop_pg_database
from sqlalchemy import text

from worker.cli import main
from worker.db.schema import code_heads
from worker.ledger.database import downgrade, make_engine, upgrade
from worker.reports import ReportError, ReportSpec, run_rebuild, run_report, run_verify

SPEC = ReportSpec(datetime(2033, 5, 1, tzinfo=UTC), datetime(2033, 5, 3, tzinfo=UTC), ("day",))
BEHIND = "0008"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of this test's own, migrated to head."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'billing.db'}"
        upgrade(url)
        yield url
        return
    name = f"billing_test_head_{uuid.uuid4().hex[:10]}"
    url = create_pg_database(name)
    upgrade(url)
    yield url
    drop_pg_database(name)


def _stamp(url: str, revision: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    finally:
        engine.dispose()


def test_at_head_the_report_runs(fresh_url: str) -> None:
    assert run_report(fresh_url, SPEC).total.counts["calls"] == 0
    assert run_verify(fresh_url) == (0, [])


def test_a_database_behind_head_is_refused_with_the_command_that_fixes_it(fresh_url: str) -> None:
    downgrade(fresh_url, BEHIND)
    heads = ", ".join(sorted(code_heads()))
    for attempt in (lambda: run_report(fresh_url, SPEC), lambda: run_verify(fresh_url),
                    lambda: run_rebuild(fresh_url)):  # fmt: skip
        with pytest.raises(ReportError) as raised:
            attempt()
        assert f"at migration {BEHIND}, head is {heads}" in str(raised.value)
        assert "billing db upgrade" in str(raised.value)


def test_a_database_ahead_of_this_release_is_refused(fresh_url: str) -> None:
    _stamp(fresh_url, "9999_from_a_newer_release")
    with pytest.raises(ReportError, match="9999_from_a_newer_release, which this release does not"):
        run_report(fresh_url, SPEC)


def test_the_cli_says_it_in_one_line_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'billing.db'}"
    upgrade(url)
    downgrade(url, BEHIND)
    monkeypatch.setenv("DATABASE_URL", url)
    result = CliRunner().invoke(main, ["report", "--since", "2033-05-01", "--until", "2033-05-03"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "run `billing db upgrade`" in lines[0], lines
