"""Revision 0009 on a book written before it: rows keep their prices and become exact-name overrides."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import create_pg_database, drop_pg_database
from sqlalchemy import text

from worker.consumer.pricing import stored_prices
from worker.core.prices import Layer
from worker.ledger.database import downgrade, make_engine, session_factory, upgrade

OLD_ROWS = """
INSERT INTO prices (pattern, effective_from, input, cached_input, output, created_at) VALUES
  ('gpt-4o*', '2024-05-13 00:00:00+00:00', '2.50', '1.25', '10.00', '2026-11-30 00:00:00+00:00'),
  ('negotiated-model', '2025-01-01 00:00:00+00:00', '1.00', '0.50', '4.00',
   '2026-11-30 00:00:00+00:00')
"""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path, pg_database_name: str) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    name = f"{pg_database_name}_prices_0009"
    yield create_pg_database(name)
    drop_pg_database(name)


def test_old_rows_survive_upgrade_and_downgrade(url: str) -> None:
    upgrade(url, "0005")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(OLD_ROWS))
        upgrade(url)  # through 0009, to the head the model (stored_prices) reads
        with session_factory(engine)() as session:
            rows = {p.model: p for p in stored_prices(session)}
        assert set(rows) == {"negotiated-model"}  # the prefix row is retired: it prices nothing
        with engine.connect() as conn:
            retired = conn.execute(text("SELECT model FROM prices WHERE layer = 'retired'")).all()
        assert [r[0] for r in retired] == ["gpt-4o*"]
        row = rows["negotiated-model"]
        assert (row.layer, row.provider, row.tier, row.cache_write, row.aliases) == (
            Layer.OVERRIDE,
            None,
            "default",
            None,
            (),
        )
        assert (row.input, row.cached_input, row.output) == (Decimal(1), Decimal("0.5"), 4)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO prices (layer, model, tier, effective_from, input, cached_input,"
                    " output, created_at) VALUES ('override', 'negotiated-model', 'flex',"
                    " '2025-01-01 00:00:00+00:00', '0.5', '0.25', '2', '2026-12-02 00:00:00+00:00')"
                )
            )
        downgrade(url, "0005")
        with engine.connect() as conn:
            kept = conn.execute(text("SELECT pattern, input FROM prices ORDER BY pattern")).all()
        assert [tuple(r) for r in kept] == [("gpt-4o*", "2.50"), ("negotiated-model", "1.00")]
    finally:
        engine.dispose()
