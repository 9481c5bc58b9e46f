"""Upstream reconciliation: the providers' usage and cost exports, and where each call was routed.

Creates ``upstream_usage``, ``upstream_costs``, ``upstream_revisions`` (figures an import replaced)
and ``call_routes`` (a call's provider and upstream key label); ``alert_outbox.kind`` admits
``upstream_leakage``. Downgrade drops the tables; outbox rows of the new kind must be gone first
(the old constraint would fail on them, and say so).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
WHEN = sa.DateTime(timezone=True)
OLD_KINDS = ("unsettled", "unsettled_rate", "parity_mismatch", "drift", "anomaly", "low_balance")
NEW_KINDS = (*OLD_KINDS, "upstream_leakage")


def _kinds(kinds: Sequence[str]) -> str:
    return "kind IN (" + ", ".join(f"'{kind}'" for kind in kinds) + ")"


def upgrade() -> None:
    op.create_table(
        "upstream_usage",
        sa.Column("id", ID, nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("bucket_start", WHEN, nullable=False),
        sa.Column("bucket_end", WHEN, nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("project_id", sa.String(200), nullable=False),
        sa.Column("api_key_id", sa.String(200), nullable=False),
        sa.Column("service_tier", sa.String(32), nullable=False),
        sa.Column("batch", sa.String(8), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("imported_at", WHEN, nullable=False),
        sa.CheckConstraint(
            "input_tokens >= 0 AND cached_tokens >= 0 AND cache_write_tokens >= 0"
            " AND output_tokens >= 0 AND (requests IS NULL OR requests >= 0)",
            name=op.f("ck_upstream_usage_counts_not_negative"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_upstream_usage")),
        sa.UniqueConstraint(
            "provider",
            "bucket_start",
            "model",
            "project_id",
            "api_key_id",
            "service_tier",
            "batch",
            name="uq_upstream_usage_key",
        ),
    )
    op.create_index(op.f("ix_upstream_usage_bucket_start"), "upstream_usage", ["bucket_start"])
    op.create_index(op.f("ix_upstream_usage_imported_at"), "upstream_usage", ["imported_at"])
    op.create_table(
        "upstream_costs",
        sa.Column("id", ID, nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("bucket_start", WHEN, nullable=False),
        sa.Column("bucket_end", WHEN, nullable=False),
        sa.Column("project_id", sa.String(200), nullable=False),
        sa.Column("api_key_id", sa.String(200), nullable=False),
        sa.Column("line_item", sa.String(300), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("amount", sa.String(40), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("imported_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_upstream_costs")),
        sa.UniqueConstraint(
            "provider",
            "bucket_start",
            "project_id",
            "api_key_id",
            "line_item",
            name="uq_upstream_costs_key",
        ),
    )
    op.create_index(op.f("ix_upstream_costs_bucket_start"), "upstream_costs", ["bucket_start"])
    op.create_table(
        "upstream_revisions",
        sa.Column("id", ID, nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("row_id", sa.BigInteger(), nullable=False),
        sa.Column("before", sa.Text(), nullable=False),
        sa.Column("after", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("revised_at", WHEN, nullable=False),
        sa.CheckConstraint("kind IN ('usage', 'cost')", name=op.f("ck_upstream_revisions_kind")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_upstream_revisions")),
    )
    op.create_index(op.f("ix_upstream_revisions_row_id"), "upstream_revisions", ["row_id"])
    op.create_table(
        "call_routes",
        sa.Column("request_id", sa.String(200), nullable=False),
        sa.Column("provider", sa.String(64), nullable=True),
        sa.Column("upstream_key", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_call_routes")),
    )
    with op.batch_alter_table("alert_outbox") as batch_op:
        batch_op.drop_constraint(op.f("ck_alert_outbox_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_alert_outbox_kind"), sa.text(_kinds(NEW_KINDS)))


def downgrade() -> None:
    with op.batch_alter_table("alert_outbox") as batch_op:
        batch_op.drop_constraint(op.f("ck_alert_outbox_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_alert_outbox_kind"), sa.text(_kinds(OLD_KINDS)))
    op.drop_table("call_routes")
    op.drop_index(op.f("ix_upstream_revisions_row_id"), table_name="upstream_revisions")
    op.drop_table("upstream_revisions")
    op.drop_index(op.f("ix_upstream_costs_bucket_start"), table_name="upstream_costs")
    op.drop_table("upstream_costs")
    op.drop_index(op.f("ix_upstream_usage_imported_at"), table_name="upstream_usage")
    op.drop_index(op.f("ix_upstream_usage_bucket_start"), table_name="upstream_usage")
    op.drop_table("upstream_usage")
