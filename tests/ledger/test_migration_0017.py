"""Revision 0017: ``anomalies.kind`` admits ``model_substituted``; downgrade narrows it again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import create_pg_database, drop_pg_database
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from worker.ledger.database import downgrade, make_engine, upgrade

CALL = (
    "INSERT INTO accounts (id, created_at) VALUES ('acct-0017', '2026-12-06 00:00:00+00:00');"
    "INSERT INTO reservations (request_id, account_id, model, stream, reserved_micros, status,"
    " created_at, updated_at) VALUES ('req-0017', 'acct-0017', 'gpt-4o', true, 1000, 'settled',"
    " '2026-12-06 00:00:00+00:00', '2026-12-06 00:00:00+00:00')"
)
SUBSTITUTED = (
    "INSERT INTO anomalies (reservation_id, kind, detail, detected_at) SELECT id,"
    " 'model_substituted', 'requested gpt-4o, served gpt-4.1', '2026-12-06 00:00:00+00:00'"
    " FROM reservations WHERE request_id = 'req-0017'"
)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path, pg_database_name: str) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    name = f"{pg_database_name}_anomalies_0017"
    yield create_pg_database(name)
    drop_pg_database(name)


def _run(engine: Engine, *statements: str) -> None:
    with engine.begin() as conn:
        for statement in statements:
            for part in statement.split(";"):
                conn.execute(text(part))


def test_revision_0017_widens_and_narrows_the_anomaly_kinds(url: str) -> None:
    upgrade(url, "0016")
    engine = make_engine(url)
    try:
        _run(engine, CALL)
        with pytest.raises(IntegrityError):
            _run(engine, SUBSTITUTED)  # before 0017 the kind is refused
        upgrade(url, "0017")
        _run(engine, SUBSTITUTED)
        with engine.connect() as conn:
            kinds = conn.execute(text("SELECT kind, detail FROM anomalies")).all()
        assert [tuple(row) for row in kinds] == [
            ("model_substituted", "requested gpt-4o, served gpt-4.1")
        ]
        with pytest.raises(IntegrityError):
            downgrade(url, "0016")  # a row of the new kind must be gone first
        engine.dispose()
        _run(engine, "DELETE FROM anomalies")
        downgrade(url, "0016")
        with pytest.raises(IntegrityError):
            _run(engine, SUBSTITUTED)
        _run(
            engine,
            "INSERT INTO anomalies (reservation_id, kind, detail, detected_at) SELECT id,"
            " 'charged_late', NULL, '2026-12-06 00:00:00+00:00' FROM reservations",
        )
    finally:
        engine.dispose()
