"""Money per call day: ``money_daily``, kept by the ledger's writers, backfilled from the ledger.

One row per (UTC day of ``reservations.created_at``, account, model) with held, charged, true-ups and
released: the report's money section reads it instead of joining every entry to its transaction, its
reservation and its ledger account. From this release on the workers add their deltas in the same
transaction as the postings (``worker.ledger.postings``). Not append-only (no triggers): its rows are
updated in place.

The backfill is one ``INSERT … SELECT`` of the ledger join (the report's money query until now,
grouped by the rollup's key). Workers of the previous release keep posting without the rollup until
they are replaced: run ``billing report --rebuild-rollup`` once they are (docs/reports.md).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 07:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DAY = {
    "postgresql": "CAST(r.created_at AT TIME ZONE 'UTC' AS DATE)",
    "sqlite": "date(r.created_at)",  # SQLite keeps naive UTC text
}

# The report's money figures, as ``worker.reports.query`` computed them from the ledger until now.
BACKFILL = """
INSERT INTO money_daily (day, account_id, model, held, charged, true_ups, released)
SELECT {day}, r.account_id, r.model,
       SUM(CASE WHEN t.kind = 'hold' AND e.direction = 'credit' THEN e.amount ELSE 0 END),
       SUM(CASE WHEN la.kind = 'revenue' AND e.direction = 'credit' THEN e.amount
                WHEN la.kind = 'revenue' THEN -e.amount ELSE 0 END),
       SUM(CASE WHEN t.kind = 'true_up' AND la.kind = 'revenue' AND e.direction = 'credit'
                THEN e.amount ELSE 0 END),
       SUM(CASE WHEN la.kind = 'available' AND e.direction = 'credit' THEN e.amount ELSE 0 END)
  FROM entries AS e
  JOIN transactions AS t ON t.id = e.transaction_id
  JOIN reservations AS r ON r.id = t.reservation_id
  JOIN ledger_accounts AS la ON la.id = e.ledger_account_id
 GROUP BY {day}, r.account_id, r.model
"""


def upgrade() -> None:
    op.create_table(
        "money_daily",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("held", sa.BigInteger(), nullable=False),
        sa.Column("charged", sa.BigInteger(), nullable=False),
        sa.Column("true_ups", sa.BigInteger(), nullable=False),
        sa.Column("released", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "account_id", "model", name=op.f("pk_money_daily")),
    )
    dialect = op.get_bind().dialect.name
    op.execute(BACKFILL.format(day=DAY[dialect]))
    if dialect == "postgresql":
        op.execute("ANALYZE money_daily")


def downgrade() -> None:
    op.drop_table("money_daily")
