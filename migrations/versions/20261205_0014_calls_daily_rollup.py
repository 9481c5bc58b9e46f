"""Calls per call day and state: ``calls_daily``, kept by the ledger's writers, backfilled from the calls.

One row per (UTC day of ``reservations.created_at``, account, model, status, usage source, provider,
usage shape, failure reason, failure action) — '' where a call has none — with the calls' counts,
holds, charges, provider costs and exposure (``models.rollup.CallsDaily``). The report's calls and
providers sections read it for whole UTC days instead of joining every reservation to its usage
record and failure. From this release on the workers move each call between its rows in the
transaction that changes it (``worker.ledger.rollup``).

The backfill is one ``INSERT … SELECT`` of ``reservations ⟕ usage_records ⟕ failures`` grouped by the
key (what ``billing report --verify-ledger`` compares the table with). Workers of the previous release
keep writing without it until they are replaced: run ``billing report --rebuild-rollup`` once they are
(docs/reports.md).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DAY = {
    "postgresql": "CAST(r.created_at AT TIME ZONE 'UTC' AS DATE)",
    "sqlite": "date(r.created_at)",  # SQLite keeps naive UTC text
}

# Each call in the row of its state, as ``worker.ledger.rollup.call_measures`` places it.
BACKFILL = """
INSERT INTO calls_daily (day, account_id, model, status, usage_source, provider, usage_shape,
                         reason, action, calls, streamed, reserved, charged, costed_calls,
                         charged_costed, provider_cost, exposure)
SELECT {day}, r.account_id, r.model, r.status, COALESCE(u.usage_source, ''),
       COALESCE(u.provider, ''), COALESCE(u.usage_shape, ''), COALESCE(f.reason, ''),
       COALESCE(f.action, ''),
       COUNT(*),
       SUM(CASE WHEN r.stream THEN 1 ELSE 0 END),
       SUM(r.reserved_micros),
       COALESCE(SUM(u.charge_micros), 0),
       COUNT(u.provider_cost_micros),
       COALESCE(SUM(CASE WHEN u.provider_cost_micros IS NOT NULL THEN u.charge_micros END), 0),
       COALESCE(SUM(u.provider_cost_micros), 0),
       COALESCE(SUM(f.exposure_micros), 0)
  FROM reservations AS r
  LEFT JOIN usage_records AS u ON u.reservation_id = r.id
  LEFT JOIN failures AS f ON f.reservation_id = r.id
 GROUP BY {day}, r.account_id, r.model, r.status, COALESCE(u.usage_source, ''),
          COALESCE(u.provider, ''), COALESCE(u.usage_shape, ''), COALESCE(f.reason, ''),
          COALESCE(f.action, '')
"""


def upgrade() -> None:
    key = (
        ("day", sa.Date()),
        ("account_id", sa.String(length=200)),
        ("model", sa.String(length=200)),
        ("status", sa.String(length=32)),
        ("usage_source", sa.String(length=16)),
        ("provider", sa.String(length=64)),
        ("usage_shape", sa.String(length=32)),
        ("reason", sa.String(length=32)),
        ("action", sa.String(length=32)),
    )
    measures = (
        "calls", "streamed", "reserved", "charged", "costed_calls", "charged_costed",
        "provider_cost", "exposure",
    )  # fmt: skip
    op.create_table(
        "calls_daily",
        *(sa.Column(name, kind, nullable=False) for name, kind in key),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in measures),
        sa.PrimaryKeyConstraint(*(name for name, _ in key), name=op.f("pk_calls_daily")),
    )
    dialect = op.get_bind().dialect.name
    op.execute(BACKFILL.format(day=DAY[dialect]))
    if dialect == "postgresql":
        op.execute("ANALYZE calls_daily")


def downgrade() -> None:
    op.drop_table("calls_daily")
