"""Funded accounts: credits and reversals (``account_credits``), credit limits (``credit_limits``),
and the ``low_balance`` alert kind in the outbox.

A credit's money moves in a ``fund`` ledger transaction (a kind the ledger has allowed since 0001)
from the system ``credit`` account to the customer's ``available`` account; a reversal moves it
back in another ``fund`` transaction. Neither has a reservation, so neither reaches ``money_daily``
nor the report's money (both join reservations).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
OLD_KINDS = "'unsettled', 'unsettled_rate', 'parity_mismatch', 'drift', 'anomaly'"
NEW_KINDS = OLD_KINDS + ", 'low_balance'"


def upgrade() -> None:
    op.create_table(
        "account_credits",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("reverses_id", BIG_ID, nullable=True),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("transaction_id", BIG_ID, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("amount_micros > 0", name=op.f("ck_account_credits_amount_positive")),
        sa.CheckConstraint(
            "(kind = 'credit' AND idempotency_key IS NOT NULL AND reverses_id IS NULL)"
            " OR (kind = 'reversal' AND idempotency_key IS NULL AND reverses_id IS NOT NULL)",
            name=op.f("ck_account_credits_kind_key"),
        ),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_account_credits_account_id_accounts")
        ),
        sa.ForeignKeyConstraint(
            ["reverses_id"],
            ["account_credits.id"],
            name=op.f("fk_account_credits_reverses_id_account_credits"),
        ),
        sa.ForeignKeyConstraint(
            ["transaction_id"],
            ["transactions.id"],
            name=op.f("fk_account_credits_transaction_id_transactions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_account_credits")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_account_credits_idempotency_key")),
        sa.UniqueConstraint("reverses_id", name=op.f("uq_account_credits_reverses_id")),
        sa.UniqueConstraint("transaction_id", name=op.f("uq_account_credits_transaction_id")),
    )
    op.create_index(
        op.f("ix_account_credits_account_id_created_at"),
        "account_credits",
        ["account_id", "created_at"],
    )
    op.create_table(
        "credit_limits",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("limit_micros", sa.BigInteger(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("set_by", sa.String(length=200), nullable=False),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("limit_micros >= 0", name=op.f("ck_credit_limits_limit_not_negative")),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_credit_limits_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_credit_limits")),
    )
    op.create_index(
        op.f("ix_credit_limits_account_id_set_at"), "credit_limits", ["account_id", "set_at"]
    )
    _outbox_kinds(NEW_KINDS)


def downgrade() -> None:
    op.execute("DELETE FROM alert_outbox WHERE kind = 'low_balance'")
    _outbox_kinds(OLD_KINDS)
    op.drop_index(op.f("ix_credit_limits_account_id_set_at"), table_name="credit_limits")
    op.drop_table("credit_limits")
    op.drop_index(op.f("ix_account_credits_account_id_created_at"), table_name="account_credits")
    op.drop_table("account_credits")
    # The fund transactions stay: the ledger is append-only (its triggers refuse the DELETE), and
    # their money stays in the customers' available balances.


def _outbox_kinds(kinds: str) -> None:
    with op.batch_alter_table("alert_outbox") as batch:
        batch.drop_constraint(op.f("ck_alert_outbox_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_alert_outbox_kind"), sa.text(f"kind IN ({kinds})"))
