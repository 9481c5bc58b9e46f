"""``failures.exposure_reported`` (the exposure is the price of usage the provider reported before
an error, which ``charge_delivered`` charges at the grace's end), and ``anomalies.kind`` admits
``prompt_uncounted`` (a request entry without its prompt and no count of it: the estimate lacks
the prompt).

Downgrade drops the column and deletes the anomalies of the new kind (the old constraint would
refuse them).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 15:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
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
)
NEW = ("prompt_uncounted",)
NEW_KINDS = (*OLD_KINDS, *NEW)


def _within(column: str, values: Sequence[str]) -> str:
    return f"{column} IN (" + ", ".join(f"'{value}'" for value in values) + ")"


def _swap(condition: str) -> None:
    # Batch mode: on SQLite a CHECK changes only by copying the table; PostgreSQL alters in place.
    with op.batch_alter_table("anomalies") as batch_op:
        batch_op.drop_constraint(op.f("ck_anomalies_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_anomalies_kind"), sa.text(condition))


def upgrade() -> None:
    with op.batch_alter_table("failures") as batch_op:
        batch_op.add_column(
            sa.Column(
                "exposure_reported", sa.Boolean(), server_default=sa.text("false"), nullable=False
            )
        )
    _swap(_within("kind", NEW_KINDS))


def downgrade() -> None:
    with op.batch_alter_table("failures") as batch_op:
        batch_op.drop_column("exposure_reported")
    op.execute("DELETE FROM anomalies WHERE " + _within("kind", NEW))
    _swap(_within("kind", OLD_KINDS))
