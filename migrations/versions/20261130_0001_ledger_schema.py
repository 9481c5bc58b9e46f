"""The ledger schema: accounts, prices, reservations, the double-entry ledger, usage, failures.

On PostgreSQL the ledger keeps itself honest: a deferred constraint trigger refuses a transaction whose
entries do not sum to zero (or that has fewer than two), and triggers refuse UPDATE, DELETE and TRUNCATE
of entries and transactions. SQLite gets the append-only triggers too; balance is checked by the code.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 06:07:13.043619
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    _create_tables()
    _seed_system_accounts()
    _create_triggers()


def _create_tables() -> None:
    op.create_table(
        "accounts",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_accounts")),
    )
    op.create_table(
        "prices",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("pattern", sa.String(length=200), nullable=False),
        sa.Column("effective_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("input", sa.String(length=40), nullable=False),
        sa.Column("cached_input", sa.String(length=40), nullable=False),
        sa.Column("output", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_prices")),
        sa.UniqueConstraint(
            "pattern", "effective_from", name=op.f("uq_prices_pattern_effective_from")
        ),
    )
    op.create_table(
        "ledger_accounts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=220), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=True),
        sa.CheckConstraint(
            "(kind IN ('available', 'held') AND account_id IS NOT NULL) OR (kind IN ('revenue', 'credit') AND account_id IS NULL)",
            name=op.f("ck_ledger_accounts_kind_owner"),
        ),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_ledger_accounts_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_accounts")),
        sa.UniqueConstraint("name", name=op.f("uq_ledger_accounts_name")),
    )
    op.create_index(
        op.f("ix_ledger_accounts_account_id"), "ledger_accounts", ["account_id"], unique=False
    )
    op.create_table(
        "reservations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("request_id", sa.String(length=200), nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("stream", sa.Boolean(), nullable=False),
        sa.Column("reserved_micros", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fingerprint", sa.String(length=128), nullable=True),
        sa.CheckConstraint(
            "status IN ('held', 'settled', 'voided', 'unsettled', 'released', 'settled_from_estimate')",
            name=op.f("ck_reservations_status"),
        ),
        sa.CheckConstraint(
            "reserved_micros >= 0", name=op.f("ck_reservations_reserved_not_negative")
        ),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_reservations_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reservations")),
        sa.UniqueConstraint("request_id", name=op.f("uq_reservations_request_id")),
    )
    op.create_index(
        op.f("ix_reservations_account_id"), "reservations", ["account_id"], unique=False
    )
    op.create_index(
        op.f("ix_reservations_fingerprint"), "reservations", ["fingerprint"], unique=False
    )
    op.create_table(
        "failures",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "reservation_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("estimate_prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("estimate_completion_tokens", sa.Integer(), nullable=False),
        sa.Column("exposure_micros", sa.BigInteger(), nullable=True),
        sa.Column("finish_reasons", sa.Text(), nullable=True),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_by", sa.String(length=200), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("action", sa.String(length=32), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "action IS NULL OR action IN ('release', 'charge_estimate', 'settled_late')",
            name=op.f("ck_failures_action"),
        ),
        sa.CheckConstraint(
            "reason IN ('error_finish', 'incomplete', 'missing_usage', 'unpriced')",
            name=op.f("ck_failures_reason"),
        ),
        sa.CheckConstraint(
            "(resolved_by IS NULL AND resolved_at IS NULL AND action IS NULL AND note IS NULL) OR (resolved_by IS NOT NULL AND resolved_at IS NOT NULL AND action IS NOT NULL AND note IS NOT NULL)",
            name=op.f("ck_failures_resolution_all_or_none"),
        ),
        sa.CheckConstraint(
            "exposure_micros IS NULL OR exposure_micros >= 0", name=op.f("ck_failures_exposure")
        ),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name=op.f("fk_failures_reservation_id_reservations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_failures")),
        sa.UniqueConstraint("reservation_id", name=op.f("uq_failures_reservation_id")),
    )
    op.create_index(op.f("ix_failures_detected_at"), "failures", ["detected_at"], unique=False)
    op.create_table(
        "transactions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "reservation_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("flagged", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "kind IN ('hold', 'charge', 'release', 'true_up', 'resolve_charge', 'resolve_release', 'fund')",
            name=op.f("ck_transactions_kind"),
        ),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name=op.f("fk_transactions_reservation_id_reservations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_transactions")),
        sa.UniqueConstraint(
            "reservation_id", "kind", name=op.f("uq_transactions_reservation_id_kind")
        ),
    )
    op.create_table(
        "usage_records",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "reservation_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("reasoning_tokens", sa.Integer(), nullable=False),
        sa.Column("usage_source", sa.String(length=16), nullable=False),
        sa.Column("finish_reasons", sa.Text(), nullable=True),
        sa.Column("charge_micros", sa.BigInteger(), nullable=False),
        sa.Column("estimate_prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("estimate_completion_tokens", sa.Integer(), nullable=False),
        sa.Column("estimate_approximate", sa.Boolean(), nullable=False),
        sa.Column("system_fingerprint", sa.String(length=200), nullable=True),
        sa.Column("completion_id", sa.String(length=200), nullable=True),
        sa.Column("anomalies", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "usage_source IN ('reported', 'estimated')", name=op.f("ck_usage_records_usage_source")
        ),
        sa.CheckConstraint("charge_micros >= 0", name=op.f("ck_usage_records_charge_not_negative")),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name=op.f("fk_usage_records_reservation_id_reservations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_records")),
        sa.UniqueConstraint("reservation_id", name=op.f("uq_usage_records_reservation_id")),
    )
    op.create_table(
        "entries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column(
            "transaction_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column(
            "ledger_account_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
        ),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("direction", sa.String(length=6), nullable=False),
        sa.CheckConstraint("direction IN ('debit', 'credit')", name=op.f("ck_entries_direction")),
        sa.CheckConstraint("amount > 0", name=op.f("ck_entries_amount_positive")),
        sa.ForeignKeyConstraint(
            ["ledger_account_id"],
            ["ledger_accounts.id"],
            name=op.f("fk_entries_ledger_account_id_ledger_accounts"),
        ),
        sa.ForeignKeyConstraint(
            ["transaction_id"],
            ["transactions.id"],
            name=op.f("fk_entries_transaction_id_transactions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_entries")),
    )
    op.create_index(
        op.f("ix_entries_ledger_account_id"), "entries", ["ledger_account_id"], unique=False
    )
    op.create_index(op.f("ix_entries_transaction_id"), "entries", ["transaction_id"], unique=False)


def downgrade() -> None:
    _drop_triggers()
    op.drop_index(op.f("ix_entries_transaction_id"), table_name="entries")
    op.drop_index(op.f("ix_entries_ledger_account_id"), table_name="entries")
    op.drop_table("entries")
    op.drop_table("usage_records")
    op.drop_table("transactions")
    op.drop_index(op.f("ix_failures_detected_at"), table_name="failures")
    op.drop_table("failures")
    op.drop_index(op.f("ix_reservations_fingerprint"), table_name="reservations")
    op.drop_index(op.f("ix_reservations_account_id"), table_name="reservations")
    op.drop_table("reservations")
    op.drop_index(op.f("ix_ledger_accounts_account_id"), table_name="ledger_accounts")
    op.drop_table("ledger_accounts")
    op.drop_table("prices")
    op.drop_table("accounts")


def _seed_system_accounts() -> None:
    ledger_accounts = sa.table(
        "ledger_accounts",
        sa.column("name", sa.String),
        sa.column("kind", sa.String),
        sa.column("account_id", sa.String),
    )
    op.bulk_insert(
        ledger_accounts,
        [
            {"name": "revenue", "kind": "revenue", "account_id": None},
            {"name": "credit", "kind": "credit", "account_id": None},
        ],
    )


PG_BALANCED = """
CREATE FUNCTION ledger_check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    txn bigint;
    total numeric;
    legs integer;
BEGIN
    IF TG_TABLE_NAME = 'transactions' THEN
        txn := NEW.id;
    ELSE
        txn := NEW.transaction_id;
    END IF;
    SELECT COALESCE(SUM(CASE WHEN direction = 'credit' THEN amount ELSE -amount END), 0), COUNT(*)
      INTO total, legs
      FROM entries WHERE transaction_id = txn;
    IF total <> 0 OR legs < 2 THEN
        RAISE EXCEPTION 'ledger transaction % does not balance (sum %, % entries)', txn, total, legs
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$
"""

PG_APPEND_ONLY = """
CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END
$$
"""

LEDGER_TABLES = ("transactions", "entries")


def _create_triggers() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(PG_BALANCED)
        op.execute(PG_APPEND_ONLY)
        for table in LEDGER_TABLES:
            op.execute(
                f"CREATE CONSTRAINT TRIGGER {table}_balanced AFTER INSERT ON {table}"
                " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
                " EXECUTE FUNCTION ledger_check_balanced()"
            )
            op.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}"
                " FOR EACH ROW EXECUTE FUNCTION ledger_append_only()"
            )
            op.execute(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}"
                " FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only()"
            )
    else:
        for table in LEDGER_TABLES:
            for event in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{event.lower()} BEFORE {event} ON {table}"
                    f" BEGIN SELECT RAISE(ABORT, 'the ledger is append-only: {event} on {table}"
                    " refused'); END"
                )


def _drop_triggers() -> None:
    if op.get_context().dialect.name == "postgresql":
        for table in LEDGER_TABLES:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_balanced ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
        op.execute("DROP FUNCTION IF EXISTS ledger_check_balanced()")
        op.execute("DROP FUNCTION IF EXISTS ledger_append_only()")
    else:
        for table in LEDGER_TABLES:
            for event in ("update", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS {table}_no_{event}")
