"""Image generation usage on usage records.

``usage_records`` gains ``image_completion_tokens`` (image output tokens of a GPT Image call, a
part of ``completion_tokens``, priced at a row's ``image_output`` rate), ``images`` (images billed
per image: DALL·E) and their ``image_size`` / ``image_quality`` (which pick the row's
``per_image`` price), so a charge can be recomputed from the record. 0 / NULL on existing rows.
The prices' new dimensions (``image_output``, ``per_image``) live in ``prices.dimensions`` (JSON
text, revision 0018): no column.

Downgrade drops the four columns: stored calls lose them (their charges stay as posted).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-08 12:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        for name in ("image_completion_tokens", "images"):
            batch.add_column(
                sa.Column(name, sa.Integer(), server_default=sa.text("0"), nullable=False)
            )
        batch.add_column(sa.Column("image_size", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("image_quality", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        for name in ("image_quality", "image_size", "images", "image_completion_tokens"):
            batch.drop_column(name)
