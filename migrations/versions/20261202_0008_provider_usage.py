"""Provider usage: the canonical usage parts, the provider and its own cost on usage records; the
unsettled reasons and anomaly kinds of the provider usage rules.

``usage_records`` gains ``cache_write_tokens``, ``audio_prompt_tokens`` and
``audio_completion_tokens`` (parts of the prompt and completion counts; 0 on existing rows),
``provider``, ``usage_shape``, ``service_tier`` and ``provider_cost_micros`` (NULL on existing rows).
``failures.reason`` admits ``inconsistent_usage`` and ``implausible_usage``; ``anomalies.kind``
admits ``frames_after_done``, ``n_ignored``, ``provider_cost_drift``, ``implausible_usage`` and
``inconsistent_usage``. Downgrade refuses nothing: rows with the new reasons or kinds must be gone
before it runs (the old constraints would fail on them, and say so).

Revision ID: 0008
Revises: 0005
Create Date: 2026-12-02 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_REASONS = ("error_finish", "incomplete", "missing_usage", "unpriced")
NEW_REASONS = (*OLD_REASONS, "inconsistent_usage", "implausible_usage")
OLD_KINDS = (
    "idempotency_key_on_stream",
    "non_streamable_stream",
    "no_close",
    "no_open",
    "foreign_chunks",
    "mixed_ids",
    "charge_above_hold",
    "request_id_reused",  # 0006
)
NEW_KINDS = (
    *OLD_KINDS,
    "frames_after_done",
    "n_ignored",
    "provider_cost_drift",
    "implausible_usage",
    "inconsistent_usage",
)
COUNTS = ("cache_write_tokens", "audio_prompt_tokens", "audio_completion_tokens")


def _within(column: str, values: Sequence[str]) -> str:
    return f"{column} IN (" + ", ".join(f"'{value}'" for value in values) + ")"


def _swap(table: str, name: str, condition: str) -> None:
    with op.batch_alter_table(table) as batch_op:
        batch_op.drop_constraint(op.f(f"ck_{table}_{name}"), type_="check")
        batch_op.create_check_constraint(op.f(f"ck_{table}_{name}"), sa.text(condition))


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as batch_op:
        for column in COUNTS:
            batch_op.add_column(
                sa.Column(column, sa.Integer(), server_default=sa.text("0"), nullable=False)
            )
        batch_op.add_column(sa.Column("provider", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("usage_shape", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("service_tier", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("provider_cost_micros", sa.BigInteger(), nullable=True))
    _swap("failures", "reason", _within("reason", NEW_REASONS))
    _swap("anomalies", "kind", _within("kind", NEW_KINDS))


def downgrade() -> None:
    _swap("anomalies", "kind", _within("kind", OLD_KINDS))
    _swap("failures", "reason", _within("reason", OLD_REASONS))
    with op.batch_alter_table("usage_records") as batch_op:
        for column in ("provider_cost_micros", "service_tier", "usage_shape", "provider"):
            batch_op.drop_column(column)
        for column in reversed(COUNTS):
            batch_op.drop_column(column)
