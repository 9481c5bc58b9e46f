"""The report reads one table per section: usage records carry their call's model and creation time.

``usage_records`` gains ``model`` and ``requested_at`` (the reservation's ``model`` and
``created_at``), backfilled from ``reservations``, with an index on ``requested_at`` (the report's
window), a partial index on the few records settled at the estimate, and a partial index
``(model, drift_ppm) INCLUDE (requested_at)`` over the records with a drift, from which the drift
percentiles are read without touching the table. ``drift_ppm`` is recomputed
for every streamed call with reported usage on the one definition the worker writes since: visible
completion tokens (completion minus reasoning) against the estimate, truncated toward zero; 0002's
backfill compared all completion tokens, which is wrong for reasoning models.

PostgreSQL also gets statistics on the UTC day of ``reservations.created_at``, so the planner knows
there are few days and aggregates the report's per-day queries in memory instead of sorting.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 07:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ESTIMATED = "usage_source = 'estimated'"
HAS_DRIFT = "drift_ppm IS NOT NULL"
DAY_STATISTICS = "stx_reservations_created_day"

BACKFILL_CALL = {
    "postgresql": """
UPDATE usage_records AS u
   SET model = r.model, requested_at = r.created_at
  FROM reservations AS r
 WHERE r.id = u.reservation_id
""",
    "sqlite": """
UPDATE usage_records
   SET model = (SELECT model FROM reservations WHERE reservations.id = reservation_id),
       requested_at = (SELECT created_at FROM reservations WHERE reservations.id = reservation_id)
""",
}

# BIGINT before multiplying: a difference of a few thousand tokens times 10^6 overflows INTEGER.
BACKFILL_DRIFT = """
UPDATE usage_records
   SET drift_ppm = (CAST(completion_tokens - reasoning_tokens - estimate_completion_tokens AS BIGINT)
                    * 1000000) / estimate_completion_tokens
 WHERE usage_source = 'reported'
   AND estimate_completion_tokens > 0
   AND reservation_id IN (SELECT id FROM reservations WHERE stream)
"""


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as batch_op:
        batch_op.add_column(sa.Column("model", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("requested_at", sa.DateTime(timezone=True), nullable=True))
    dialect = op.get_bind().dialect.name
    op.execute(BACKFILL_CALL[dialect])
    op.execute(BACKFILL_DRIFT)
    op.create_index(
        op.f("ix_usage_records_requested_at"), "usage_records", ["requested_at"], unique=False
    )
    op.create_index(
        "ix_usage_records_estimated",
        "usage_records",
        ["reservation_id"],
        unique=False,
        postgresql_where=sa.text(ESTIMATED),
        sqlite_where=sa.text(ESTIMATED),
    )
    op.create_index(
        "ix_usage_records_drift",
        "usage_records",
        ["model", "drift_ppm"],
        unique=False,
        postgresql_include=["requested_at"],
        postgresql_where=sa.text(HAS_DRIFT),
        sqlite_where=sa.text(HAS_DRIFT),
    )
    if dialect == "postgresql":
        op.execute(
            f"CREATE STATISTICS {DAY_STATISTICS} ON ((created_at AT TIME ZONE 'UTC')::date)"
            " FROM reservations"
        )
        op.execute("ANALYZE reservations")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP STATISTICS IF EXISTS {DAY_STATISTICS}")
    op.drop_index("ix_usage_records_drift", table_name="usage_records")
    op.drop_index("ix_usage_records_estimated", table_name="usage_records")
    op.drop_index(op.f("ix_usage_records_requested_at"), table_name="usage_records")
    with op.batch_alter_table("usage_records") as batch_op:
        batch_op.drop_column("requested_at")
        batch_op.drop_column("model")
