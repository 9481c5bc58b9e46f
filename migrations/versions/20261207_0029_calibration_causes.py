"""Calibration versions say why they were written.

``calibration_factors`` gains ``cause`` (why this version was written: ``first``, ``tokenizer``,
``mix``, ``refit`` or ``too_few_calls``; NULL on existing versions), ``segment_stats`` (JSON text,
``{"prompt": {segment or "*": [ratio_ppm, se_ppm, samples]}, "completion": {...}}``: the
statistics the version was written with, the baseline later fits are compared with; written once;
NULL on existing versions until the next learning pass fills it) and ``moves`` (JSON text: what
moved past its threshold when ``cause`` is ``tokenizer`` or ``mix``).

Downgrade drops the three columns.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-08 18:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("calibration_factors") as batch:
        batch.add_column(sa.Column("cause", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("segment_stats", sa.Text(), nullable=True))
        batch.add_column(sa.Column("moves", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calibration_factors") as batch:
        batch.drop_column("moves")
        batch.drop_column("segment_stats")
        batch.drop_column("cause")
