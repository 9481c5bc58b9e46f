"""Reused request ids: ``reservations.request_digest`` and the anomaly kind ``request_id_reused``.

``request_digest`` (SHA-256 hex of the request entry's stream id and the reservation's fields, see
``worker.core.request.request_digest``) is written once, at the hold. A notification whose request entry
has another digest is a second call published under the same request id: the worker dead-letters it
and records the anomaly on the first call's reservation. The column is nullable: rows held before
this release keep NULL, which the worker reads as "unknown" and never as a reuse. Adding a nullable
column without a default rewrites no row on either engine.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 09:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ANOMALY_KINDS = (
    "idempotency_key_on_stream",
    "non_streamable_stream",
    "no_close",
    "no_open",
    "foreign_chunks",
    "mixed_ids",
    "charge_above_hold",
)
NEW_KIND = "request_id_reused"


def _kinds(kinds: Sequence[str]) -> str:
    return "kind IN (" + ", ".join(f"'{kind}'" for kind in kinds) + ")"


def _replace_kind_check(kinds: Sequence[str]) -> None:
    # Batch mode: on SQLite a CHECK changes only by copying the table; on PostgreSQL these are plain
    # ALTER TABLE statements.
    with op.batch_alter_table("anomalies") as batch:
        batch.drop_constraint(op.f("ck_anomalies_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_anomalies_kind"), sa.text(_kinds(kinds)))


def upgrade() -> None:
    op.add_column("reservations", sa.Column("request_digest", sa.String(length=64), nullable=True))
    _replace_kind_check((*ANOMALY_KINDS, NEW_KIND))


def downgrade() -> None:
    op.execute(sa.text(f"DELETE FROM anomalies WHERE kind = '{NEW_KIND}'"))
    _replace_kind_check(ANOMALY_KINDS)
    # Not batch mode: on SQLite that copies the table, and dropping the old copy of a table other
    # rows refer to fails its foreign keys. SQLite (3.35+) drops a plain column in place.
    if op.get_bind().dialect.name == "sqlite":
        op.execute(sa.text("ALTER TABLE reservations DROP COLUMN request_digest"))
    else:
        op.drop_column("reservations", "request_digest")
