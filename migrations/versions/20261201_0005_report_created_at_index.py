"""The report's window on reservations: an index on ``created_at``, and day statistics it can use.

``ix_reservations_created_at`` (one 8-byte key per reservation; ``created_at`` is written once, at the
hold, and never updated, so the settle's UPDATE of the status stays a HOT candidate as before) lets the
report find the calls outside its window without reading the calls inside it: anomalies in the window
are all anomalies minus those of the calls outside it, when those are the fewer
(``worker.reports.query.anomaly_counts``). A narrow window reads its calls through it too.

The report now computes the UTC day of a call as ``timezone(INTERVAL '0', created_at)::date`` (the
same date as ``AT TIME ZONE 'UTC'``, by arithmetic instead of a time zone looked up by name for every
row); PostgreSQL's statistics on the day move to that expression, so the planner still knows there
are few days (0003's ``stx_reservations_created_day`` was on the other spelling and is dropped).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_STATISTICS = "stx_reservations_created_day"
OLD_DAY = "(created_at AT TIME ZONE 'UTC')::date"
STATISTICS = "stx_reservations_created_utc_day"
DAY = "(timezone(INTERVAL '0', created_at))::date"


def upgrade() -> None:
    op.create_index(op.f("ix_reservations_created_at"), "reservations", ["created_at"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP STATISTICS IF EXISTS {OLD_STATISTICS}")
        op.execute(f"CREATE STATISTICS {STATISTICS} ON ({DAY}) FROM reservations")
        op.execute("ANALYZE reservations")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP STATISTICS IF EXISTS {STATISTICS}")
        op.execute(f"CREATE STATISTICS {OLD_STATISTICS} ON ({OLD_DAY}) FROM reservations")
        op.execute("ANALYZE reservations")
    op.drop_index(op.f("ix_reservations_created_at"), table_name="reservations")
