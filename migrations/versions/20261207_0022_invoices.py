"""Customer invoices: ``invoices`` (the sequential number each account's month was issued under,
and the total it charged) and ``customer_details`` (what an invoice says about the customer).

Downgrade drops both tables (the invoices already sent keep their numbers on paper only).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "invoices",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("number", sa.BigInteger(), nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("total_micros", sa.BigInteger(), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("number > 0", name=op.f("ck_invoices_number_positive")),
        sa.CheckConstraint("length(month) = 7", name=op.f("ck_invoices_month_shape")),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_invoices_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invoices")),
        sa.UniqueConstraint("account_id", "month", name=op.f("uq_invoices_account_id_month")),
        sa.UniqueConstraint("number", name=op.f("uq_invoices_number")),
    )
    op.create_table(
        "customer_details",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("address", sa.Text(), nullable=True),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("tax_id", sa.String(length=64), nullable=True),
        sa.Column("set_by", sa.String(length=200), nullable=False),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_customer_details_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_customer_details")),
    )
    op.create_index(
        op.f("ix_customer_details_account_id_set_at"),
        "customer_details",
        ["account_id", "set_at"],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_customer_details_account_id_set_at"), table_name="customer_details")
    op.drop_table("customer_details")
    op.drop_table("invoices")
