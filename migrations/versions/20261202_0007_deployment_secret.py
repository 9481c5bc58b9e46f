"""A secret per deployment, generated here: the key of prompt fingerprints and output hashes.

Until now the fingerprints (``reservations.fingerprint``) and output hashes were keyed with
``BILLING_HASH_SALT`` or, when it was unset, a documented public default, which let anyone with the
database recover a short deterministic prompt by brute force. ``deployment_secrets`` holds one row per
secret; this migration creates it with a fresh ``fingerprint_key`` (``secrets.token_hex(32)``), so
every deployment upgrading through it gets its own, and the workers read it at start
(``worker.fingerprint_key``) unless ``BILLING_HASH_SALT`` is set. The value is never logged.

Fingerprints already written keep their old key: they pair no more with new ones (at most one
``BILLING_PARITY_WINDOW_SECONDS`` of twins is not paired across the upgrade).

Revision ID: 0007
Revises: 0005
Create Date: 2026-12-02 09:00:00.000000
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "deployment_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_deployment_secrets")),
    )
    now = datetime.now(UTC)
    if op.get_context().dialect.name == "sqlite":
        now = now.replace(tzinfo=None)  # models.base.UTCDateTime keeps naive UTC on SQLite
    op.bulk_insert(
        table, [{"name": "fingerprint_key", "value": secrets.token_hex(32), "created_at": now}]
    )


def downgrade() -> None:
    op.drop_table("deployment_secrets")
