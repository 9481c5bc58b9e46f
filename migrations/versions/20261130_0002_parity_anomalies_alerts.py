"""Parity pairs, contract anomalies, alert events and the alert outbox; output hash and drift on usage.

``usage_records`` gains ``output_hash`` (salted hash of the assembled output, for parity) and
``drift_ppm`` (reported vs estimated completion tokens of streamed calls, parts per million), with an
index on ``created_at`` for windowed reads. Existing streamed, reported rows get their drift backfilled
(integer division, truncated toward zero on both engines, as the worker computes it); their output hash
stays NULL (the text is gone), so they pair with a verdict that leaves completion tokens uncompared.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 06:28:09.244447
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
ANOMALY_KINDS = (
    "idempotency_key_on_stream",
    "non_streamable_stream",
    "no_close",
    "no_open",
    "foreign_chunks",
    "mixed_ids",
    "charge_above_hold",
)

BACKFILL_DRIFT = """
UPDATE usage_records
   SET drift_ppm = (CAST(completion_tokens - estimate_completion_tokens AS BIGINT) * 1000000)
                   / estimate_completion_tokens
 WHERE usage_source = 'reported'
   AND estimate_completion_tokens > 0
   AND reservation_id IN (SELECT id FROM reservations WHERE stream)
"""


def upgrade() -> None:
    op.create_table(
        "alert_outbox",
        sa.Column("id", BigId, nullable=False),
        sa.Column("dedupe_key", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "kind IN ('unsettled', 'unsettled_rate', 'parity_mismatch', 'drift', 'anomaly')",
            name=op.f("ck_alert_outbox_kind"),
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'sending', 'delivered', 'logged')",
            name=op.f("ck_alert_outbox_status"),
        ),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_alert_outbox_attempts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_outbox")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_alert_outbox_dedupe_key")),
    )
    op.create_index(
        op.f("ix_alert_outbox_status_next_attempt_at"),
        "alert_outbox",
        ["status", "next_attempt_at"],
        unique=False,
    )
    op.create_table(
        "alert_events",
        sa.Column("id", BigId, nullable=False),
        sa.Column("reservation_id", BigId, nullable=False),
        sa.Column("account_id", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("stream", sa.Boolean(), nullable=False),
        sa.Column("exposure_micros", sa.BigInteger(), nullable=True),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "exposure_micros IS NULL OR exposure_micros >= 0",
            name=op.f("ck_alert_events_exposure"),
        ),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name=op.f("fk_alert_events_reservation_id_reservations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_events")),
        sa.UniqueConstraint("reservation_id", name=op.f("uq_alert_events_reservation_id")),
    )
    op.create_index(
        op.f("ix_alert_events_detected_at"), "alert_events", ["detected_at"], unique=False
    )
    op.create_table(
        "anomalies",
        sa.Column("id", BigId, nullable=False),
        sa.Column("reservation_id", BigId, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "kind IN (" + ", ".join(f"'{kind}'" for kind in ANOMALY_KINDS) + ")",
            name=op.f("ck_anomalies_kind"),
        ),
        sa.ForeignKeyConstraint(
            ["reservation_id"],
            ["reservations.id"],
            name=op.f("fk_anomalies_reservation_id_reservations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_anomalies")),
        sa.UniqueConstraint(
            "reservation_id", "kind", name=op.f("uq_anomalies_reservation_id_kind")
        ),
    )
    op.create_index(op.f("ix_anomalies_detected_at"), "anomalies", ["detected_at"], unique=False)
    op.create_table(
        "parity_pairs",
        sa.Column("id", BigId, nullable=False),
        sa.Column("fingerprint", sa.String(length=128), nullable=False),
        sa.Column("streamed_reservation_id", BigId, nullable=False),
        sa.Column("plain_reservation_id", BigId, nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("mismatched", sa.Text(), nullable=True),
        sa.Column("outputs_identical", sa.Boolean(), nullable=True),
        sa.Column("streamed_prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("plain_prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("streamed_completion_tokens", sa.Integer(), nullable=False),
        sa.Column("plain_completion_tokens", sa.Integer(), nullable=False),
        sa.Column("streamed_charge_micros", sa.BigInteger(), nullable=False),
        sa.Column("plain_charge_micros", sa.BigInteger(), nullable=False),
        sa.Column("paired_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(verdict = 'match' AND mismatched IS NULL)"
            " OR (verdict = 'mismatch' AND mismatched IS NOT NULL)",
            name=op.f("ck_parity_pairs_verdict_fields"),
        ),
        sa.CheckConstraint(
            "verdict IN ('match', 'mismatch')", name=op.f("ck_parity_pairs_verdict")
        ),
        sa.ForeignKeyConstraint(
            ["plain_reservation_id"],
            ["reservations.id"],
            name=op.f("fk_parity_pairs_plain_reservation_id_reservations"),
        ),
        sa.ForeignKeyConstraint(
            ["streamed_reservation_id"],
            ["reservations.id"],
            name=op.f("fk_parity_pairs_streamed_reservation_id_reservations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_parity_pairs")),
        sa.UniqueConstraint(
            "plain_reservation_id", name=op.f("uq_parity_pairs_plain_reservation_id")
        ),
        sa.UniqueConstraint(
            "streamed_reservation_id", name=op.f("uq_parity_pairs_streamed_reservation_id")
        ),
    )
    op.create_index(op.f("ix_parity_pairs_paired_at"), "parity_pairs", ["paired_at"], unique=False)
    with op.batch_alter_table("usage_records") as batch_op:
        batch_op.add_column(sa.Column("output_hash", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("drift_ppm", sa.BigInteger(), nullable=True))
        batch_op.create_index(op.f("ix_usage_records_created_at"), ["created_at"], unique=False)
    op.execute(BACKFILL_DRIFT)


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch_op:
        batch_op.drop_index(op.f("ix_usage_records_created_at"))
        batch_op.drop_column("drift_ppm")
        batch_op.drop_column("output_hash")
    op.drop_index(op.f("ix_parity_pairs_paired_at"), table_name="parity_pairs")
    op.drop_table("parity_pairs")
    op.drop_index(op.f("ix_anomalies_detected_at"), table_name="anomalies")
    op.drop_table("anomalies")
    op.drop_index(op.f("ix_alert_events_detected_at"), table_name="alert_events")
    op.drop_table("alert_events")
    op.drop_index(op.f("ix_alert_outbox_status_next_attempt_at"), table_name="alert_outbox")
    op.drop_table("alert_outbox")
