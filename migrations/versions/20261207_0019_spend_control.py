"""Spend control: ``budgets`` (each account's day and month budgets, per model or for all),
``authorization_corrections`` (what the sync task had to correct in the Redis authorization
store), an index on ``usage_records.completion_id`` (``billing show`` finds a call by the id
the client saw), and ``anomalies.kind`` admits ``admitted_unchecked`` (a call served without a spend check
while Redis was unreachable).

Downgrade drops both tables and deletes the anomalies of the new kind (the old constraint would
refuse them).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 01:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
OLD_KINDS = (
    "idempotency_key_on_stream",
    "non_streamable_stream",
    "no_close",
    "no_open",
    "foreign_chunks",
    "mixed_ids",
    "charge_above_hold",
    "request_id_reused",
    "frames_after_done",
    "n_ignored",
    "provider_cost_drift",
    "implausible_usage",
    "inconsistent_usage",
    "charged_late",
    "unreadable",
    "account_fallback",
    "unpriced_component",
    "model_substituted",
)
NEW_KINDS = (*OLD_KINDS, "admitted_unchecked")
CORRECTION_KINDS = ("missed_release", "never_recorded", "unseen_charge", "unauthorized_hold")


def _within(column: str, values: Sequence[str]) -> str:
    return f"{column} IN (" + ", ".join(f"'{value}'" for value in values) + ")"


def _swap(condition: str) -> None:
    # Batch mode: on SQLite a CHECK changes only by copying the table; PostgreSQL alters in place.
    with op.batch_alter_table("anomalies") as batch_op:
        batch_op.drop_constraint(op.f("ck_anomalies_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_anomalies_kind"), sa.text(condition))


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("period", sa.String(length=8), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("limit_micros", sa.BigInteger(), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("set_by", sa.String(length=200), nullable=False),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "limit_micros IS NULL OR limit_micros >= 0",
            name=op.f("ck_budgets_limit_not_negative"),
        ),
        sa.CheckConstraint("period IN ('day', 'month')", name=op.f("ck_budgets_period")),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_budgets_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budgets")),
    )
    op.create_index(
        op.f("ix_budgets_account_id_period_model_set_at"),
        "budgets",
        ["account_id", "period", "model", "set_at"],
    )
    op.create_table(
        "authorization_corrections",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("request_id", sa.String(length=200), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            _within("kind", CORRECTION_KINDS), name=op.f("ck_authorization_corrections_kind")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_authorization_corrections")),
    )
    op.create_index(
        op.f("ix_authorization_corrections_detected_at"),
        "authorization_corrections",
        ["detected_at"],
    )
    op.create_index(op.f("ix_usage_records_completion_id"), "usage_records", ["completion_id"])
    _swap(_within("kind", NEW_KINDS))


def downgrade() -> None:
    op.drop_index(op.f("ix_usage_records_completion_id"), table_name="usage_records")
    op.execute("DELETE FROM anomalies WHERE kind = 'admitted_unchecked'")
    _swap(_within("kind", OLD_KINDS))
    op.drop_index(
        op.f("ix_authorization_corrections_detected_at"), table_name="authorization_corrections"
    )
    op.drop_table("authorization_corrections")
    op.drop_index(op.f("ix_budgets_account_id_period_model_set_at"), table_name="budgets")
    op.drop_table("budgets")
