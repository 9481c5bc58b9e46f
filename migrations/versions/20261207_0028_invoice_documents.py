"""Invoices as documents: each finalized invoice or credit note stored byte for byte, with its
lifecycle; a tax rate (or reverse charge) per customer.

``invoices`` gains ``kind`` (``invoice`` | ``credit_note``, numbered apart: the unique number
becomes unique per kind), ``prefix`` (the one it was printed with), ``document`` / ``html`` / ``pdf``
(the document as finalized), ``due_at``, ``corrects_id`` (a credit note's invoice) and ``status``
with who set it, when and why. The unique (account, month) becomes a partial unique index over
live invoices (not void), so a voided month can be invoiced again under a new number. Existing rows
are ``invoice`` / ``finalized`` with no stored document (stored when next issued).
``customer_details`` gains ``tax_rate`` (percent, decimal text) and ``reverse_charge``. The alert
outbox accepts ``invoice_finalized`` events (the webhook event of a finalized document).

Downgrade drops the new columns and index and restores the old uniques; it refuses (fails on the
unique constraints) when credit notes or a re-invoiced void month exist.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-08 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LIVE = "kind = 'invoice' AND status != 'void'"
OLD_KINDS = (
    "unsettled", "unsettled_rate", "parity_mismatch", "drift", "anomaly", "low_balance",
    "upstream_leakage",
)  # fmt: skip
NEW_KINDS = (*OLD_KINDS, "invoice_finalized")


def _outbox_kinds(kinds: Sequence[str]) -> None:
    with op.batch_alter_table("alert_outbox") as batch:
        batch.drop_constraint(op.f("ck_alert_outbox_kind"), type_="check")
        batch.create_check_constraint(
            op.f("ck_alert_outbox_kind"),
            sa.text("kind IN (" + ", ".join(f"'{kind}'" for kind in kinds) + ")"),
        )


def upgrade() -> None:
    with op.batch_alter_table("invoices") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=16), server_default="invoice", nullable=False)
        )
        batch.add_column(sa.Column("prefix", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("due_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("corrects_id", BIG_ID, nullable=True))
        batch.add_column(sa.Column("document", sa.Text(), nullable=True))
        batch.add_column(sa.Column("html", sa.Text(), nullable=True))
        batch.add_column(sa.Column("pdf", sa.LargeBinary(), nullable=True))
        batch.add_column(
            sa.Column("status", sa.String(length=16), server_default="finalized", nullable=False)
        )
        batch.add_column(sa.Column("status_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("status_by", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("status_note", sa.Text(), nullable=True))
        batch.drop_constraint(op.f("uq_invoices_account_id_month"), type_="unique")
        batch.drop_constraint(op.f("uq_invoices_number"), type_="unique")
        batch.create_unique_constraint(op.f("uq_invoices_kind_number"), ["kind", "number"])
        batch.create_foreign_key(
            op.f("fk_invoices_corrects_id_invoices"), "invoices", ["corrects_id"], ["id"]
        )
        batch.create_check_constraint(
            op.f("ck_invoices_kind_known"), "kind IN ('invoice', 'credit_note')"
        )
        batch.create_check_constraint(
            op.f("ck_invoices_status_known"),
            "status IN ('finalized', 'paid', 'overdue', 'void')",
        )
        batch.create_check_constraint(
            op.f("ck_invoices_credit_note_corrects"),
            "(kind = 'credit_note') = (corrects_id IS NOT NULL)",
        )
    op.create_index(
        "uq_invoices_live_month",
        "invoices",
        ["account_id", "month"],
        unique=True,
        sqlite_where=sa.text(LIVE),
        postgresql_where=sa.text(LIVE),
    )
    with op.batch_alter_table("customer_details") as batch:
        batch.add_column(sa.Column("tax_rate", sa.String(length=16), nullable=True))
        batch.add_column(
            sa.Column("reverse_charge", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    _outbox_kinds(NEW_KINDS)


def downgrade() -> None:
    op.execute("DELETE FROM alert_outbox WHERE kind = 'invoice_finalized'")
    _outbox_kinds(OLD_KINDS)
    with op.batch_alter_table("customer_details") as batch:
        batch.drop_column("reverse_charge")
        batch.drop_column("tax_rate")
    op.drop_index("uq_invoices_live_month", table_name="invoices")
    with op.batch_alter_table("invoices") as batch:
        batch.drop_constraint(op.f("ck_invoices_credit_note_corrects"), type_="check")
        batch.drop_constraint(op.f("ck_invoices_status_known"), type_="check")
        batch.drop_constraint(op.f("ck_invoices_kind_known"), type_="check")
        batch.drop_constraint(op.f("fk_invoices_corrects_id_invoices"), type_="foreignkey")
        batch.drop_constraint(op.f("uq_invoices_kind_number"), type_="unique")
        batch.create_unique_constraint(op.f("uq_invoices_number"), ["number"])
        batch.create_unique_constraint(
            op.f("uq_invoices_account_id_month"), ["account_id", "month"]
        )
        for column in (
            "status_note", "status_by", "status_at", "status", "pdf", "html", "document",
            "corrects_id", "due_at", "prefix", "kind",
        ):  # fmt: skip
            batch.drop_column(column)
