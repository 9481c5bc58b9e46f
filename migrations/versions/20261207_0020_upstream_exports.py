"""Upstream exports as published: ``upstream_usage.cache_write_1h_tokens`` (Anthropic's 1-hour cache
writes, priced above 5-minute ones) and ``upstream_gaps`` (imports whose last page said
``has_more`` without its next page: the report flags them until an import closes them).

Downgrade drops the table and the column (the 1-hour split of cache writes is lost; their sum
stays in ``cache_write_tokens``).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column(
        "upstream_usage",
        sa.Column("cache_write_1h_tokens", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.create_table(
        "upstream_gaps",
        sa.Column("id", ID, nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("after", WHEN, nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("recorded_at", WHEN, nullable=False),
        sa.Column("closed_at", WHEN, nullable=True),
        sa.CheckConstraint("kind IN ('usage', 'cost')", name=op.f("ck_upstream_gaps_kind")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_upstream_gaps")),
    )


def downgrade() -> None:
    op.drop_table("upstream_gaps")
    with op.batch_alter_table("upstream_usage") as batch_op:
        batch_op.drop_column("cache_write_1h_tokens")
