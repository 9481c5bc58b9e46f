"""The report's provider section: statistics on how few (provider, usage shape, usage source) there are.

The section groups every usage record in the window by those three columns
(``worker.reports.providers``). Without multi-column statistics PostgreSQL multiplies the columns'
own estimates into tens of thousands of groups, decides a partial aggregate per worker is not worth
it, and scans the whole table in one process; with them it knows there are a handful and scans in
parallel, as a plain ``count(*)`` of the table does. Statistics only: nothing is written per row.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATISTICS = "stx_usage_records_provider_shape"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE STATISTICS {STATISTICS} (ndistinct)"
            " ON provider, usage_shape, usage_source FROM usage_records"
        )
        op.execute("ANALYZE usage_records")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP STATISTICS IF EXISTS {STATISTICS}")
