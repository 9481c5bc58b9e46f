"""Calibrated estimates: the ``calibration_factors`` table (per provider and model, versioned: the
ratio of reported to estimated tokens per direction, its interval, the sample, the held-out error)
and three columns on ``usage_records`` (the factors an estimated call was charged at, and their
version; NULL for the calls charged at face value).

The new columns are added without a CHECK (on SQLite one would copy the whole table): the worker
writes them from ``worker.core.calibration.Factors``, which refuses a factor that is not positive.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _direction(name: str) -> list[sa.Column]:
    return [
        sa.Column(f"{name}_factor_ppm", sa.BigInteger(), nullable=False),
        sa.Column(f"{name}_fit_ppm", sa.BigInteger(), nullable=True),
        sa.Column(f"{name}_low_ppm", sa.BigInteger(), nullable=True),
        sa.Column(f"{name}_high_ppm", sa.BigInteger(), nullable=True),
        sa.Column(f"{name}_samples", sa.Integer(), nullable=False),
        sa.Column(f"{name}_error_raw_ppm", sa.BigInteger(), nullable=True),
        sa.Column(f"{name}_error_calibrated_ppm", sa.BigInteger(), nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "calibration_factors",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("exact", sa.Boolean(), nullable=False),
        *_direction("prompt"),
        *_direction("completion"),
        sa.Column("held_out", sa.Integer(), nullable=False),
        sa.Column("drifted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("learnt_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("version >= 1", name=op.f("ck_calibration_factors_version")),
        sa.CheckConstraint(
            "prompt_factor_ppm > 0 AND completion_factor_ppm > 0",
            name=op.f("ck_calibration_factors_factor_positive"),
        ),
        sa.CheckConstraint(
            "prompt_samples >= 0 AND completion_samples >= 0 AND held_out >= 0",
            name=op.f("ck_calibration_factors_samples"),
        ),
        sa.CheckConstraint(
            "(prompt_fit_ppm IS NULL OR prompt_low_ppm <= prompt_fit_ppm"
            " AND prompt_fit_ppm <= prompt_high_ppm)"
            " AND (completion_fit_ppm IS NULL OR completion_low_ppm <= completion_fit_ppm"
            " AND completion_fit_ppm <= completion_high_ppm)",
            name=op.f("ck_calibration_factors_fit_within_interval"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibration_factors")),
        sa.UniqueConstraint(
            "provider",
            "model",
            "version",
            name=op.f("uq_calibration_factors_provider_model_version"),
        ),
    )
    op.add_column("usage_records", sa.Column("calibration_version", sa.Integer(), nullable=True))
    op.add_column("usage_records", sa.Column("prompt_factor_ppm", sa.BigInteger(), nullable=True))
    op.add_column(
        "usage_records", sa.Column("completion_factor_ppm", sa.BigInteger(), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch_op:
        batch_op.drop_column("completion_factor_ppm")
        batch_op.drop_column("prompt_factor_ppm")
        batch_op.drop_column("calibration_version")
    op.drop_table("calibration_factors")
