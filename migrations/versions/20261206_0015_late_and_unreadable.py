"""Calls charged after their resolution, calls the worker could not read, and unpriced components.

``failures.reason`` admits ``unreadable``: a call whose metadata or stream the worker refused is
still recorded from what could be read of it (request id, account, model, hold) as an unsettled
failure whose exposure is its hold, never only a dead letter; and ``unpriced_component``: a call
whose usage block holds a count in a field the price book cannot price (``worker.core.usage``), kept
unsettled with the price of the parts that were read as its exposure. ``anomalies.kind`` admits
``charged_late`` (a complete result came after the call's failure had been resolved: its own
flagged charge transaction) and ``unreadable`` (why the worker could not read the call, for
``billing show``), and ``account_fallback`` (the gateway billed the call to its fallback account:
the payer's own id was one no call can have; the detail is why, never the id), and
``unpriced_component`` (which usage fields have no price, with their values). Downgrade refuses
nothing: rows with the new reasons or kinds must be gone first (the old constraints would fail on
them, and say so).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 19:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_REASONS = (
    "error_finish",
    "incomplete",
    "missing_usage",
    "unpriced",
    "inconsistent_usage",
    "implausible_usage",
)
NEW_REASONS = (*OLD_REASONS, "unreadable", "unpriced_component")
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
)
NEW_KINDS = (*OLD_KINDS, "charged_late", "unreadable", "account_fallback", "unpriced_component")


def _within(column: str, values: Sequence[str]) -> str:
    return f"{column} IN (" + ", ".join(f"'{value}'" for value in values) + ")"


def _swap(table: str, name: str, condition: str) -> None:
    # Batch mode: on SQLite a CHECK changes only by copying the table (neither table is referred
    # to by another's foreign key); on PostgreSQL these are plain ALTER TABLE statements.
    with op.batch_alter_table(table) as batch_op:
        batch_op.drop_constraint(op.f(f"ck_{table}_{name}"), type_="check")
        batch_op.create_check_constraint(op.f(f"ck_{table}_{name}"), sa.text(condition))


def upgrade() -> None:
    _swap("failures", "reason", _within("reason", NEW_REASONS))
    _swap("anomalies", "kind", _within("kind", NEW_KINDS))


def downgrade() -> None:
    _swap("anomalies", "kind", _within("kind", OLD_KINDS))
    _swap("failures", "reason", _within("reason", OLD_REASONS))
