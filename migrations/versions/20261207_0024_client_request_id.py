"""Trusted request ids and unbilled routes: ``reservations.client_request_id`` (the client's own
``X-Request-Id``, kept as its reference; the billing id is the gateway's), indexed so ``billing
show`` finds a call by it, and ``anomalies.kind`` admits ``unbilled_route`` (a request served
unbilled under ``BILLING_UNBILLED_ROUTES=pass``).

Downgrade drops the column and its index and deletes the anomalies of the new kind (the old
constraint would refuse them).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 16:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

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
    "admitted_unchecked",
    "prompt_uncounted",
)
NEW_KINDS = (*OLD_KINDS, "unbilled_route")


def _within(column: str, values: Sequence[str]) -> str:
    return f"{column} IN (" + ", ".join(f"'{value}'" for value in values) + ")"


def _swap(condition: str) -> None:
    # Batch mode: on SQLite a CHECK changes only by copying the table; PostgreSQL alters in place.
    with op.batch_alter_table("anomalies") as batch_op:
        batch_op.drop_constraint(op.f("ck_anomalies_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_anomalies_kind"), sa.text(condition))


def upgrade() -> None:
    op.add_column(
        "reservations", sa.Column("client_request_id", sa.String(length=200), nullable=True)
    )
    op.create_index(
        op.f("ix_reservations_client_request_id"), "reservations", ["client_request_id"]
    )
    _swap(_within("kind", NEW_KINDS))


def downgrade() -> None:
    op.execute("DELETE FROM anomalies WHERE kind = 'unbilled_route'")
    _swap(_within("kind", OLD_KINDS))
    op.drop_index(op.f("ix_reservations_client_request_id"), table_name="reservations")
    # Not batch mode: on SQLite that copies the table, and dropping the old copy of a table other
    # rows refer to fails its foreign keys. SQLite (3.35+) drops a plain column in place.
    op.drop_column("reservations", "client_request_id")
