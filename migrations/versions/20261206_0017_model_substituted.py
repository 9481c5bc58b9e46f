"""Calls answered by another model than the one requested: ``anomalies.kind`` admits
``model_substituted``.

The upstream answered with a model the price book prices differently from the requested one (a
fallback to a pricier model): the call is priced at the model that served it, and this anomaly
records "requested X, served Y" (names only, never prompt or completion text). Downgrade refuses
nothing: rows of the new kind must be gone first (the old constraint would fail on them, and say
so).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 22:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
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
)
NEW_KINDS = (*OLD_KINDS, "model_substituted")


def _within(column: str, values: Sequence[str]) -> str:
    return f"{column} IN (" + ", ".join(f"'{value}'" for value in values) + ")"


def _swap(condition: str) -> None:
    # Batch mode: on SQLite a CHECK changes only by copying the table (no other table refers to
    # anomalies by a foreign key); on PostgreSQL these are plain ALTER TABLE statements.
    with op.batch_alter_table("anomalies") as batch_op:
        batch_op.drop_constraint(op.f("ck_anomalies_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_anomalies_kind"), sa.text(condition))


def upgrade() -> None:
    _swap(_within("kind", NEW_KINDS))


def downgrade() -> None:
    _swap(_within("kind", OLD_KINDS))
