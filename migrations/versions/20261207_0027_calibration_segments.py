"""Calibration per content segment.

``usage_records`` gains ``estimate_segment`` (the call's content segment,
``worker.core.segments``; NULL on existing rows, which calibration then learns as no segment) and
``calibration_factors`` gains ``segment_factors`` (JSON text: the factors of the segments fitted on
their own, ``{"prompt": {segment: ppm}, "completion": {...}}``; NULL on existing versions, which
charge every segment at their pooled factors, as before).

Downgrade drops both columns: versions lose their segment factors (the charges made with them stay
as posted).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-08 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.add_column(sa.Column("estimate_segment", sa.String(length=16), nullable=True))
    with op.batch_alter_table("calibration_factors") as batch:
        batch.add_column(sa.Column("segment_factors", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calibration_factors") as batch:
        batch.drop_column("segment_factors")
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("estimate_segment")
