"""Citation tokens and inference geography on usage records.

``usage_records`` gains ``citation_tokens`` (Perplexity's citation tokens, a part of
``prompt_tokens``, priced at a row's ``citation`` rate; 0 on existing rows) and ``inference_geo``
(where the provider says inference ran, Anthropic's ``usage.inference_geo``: a row's multiplier
applies; NULL on existing rows and when the usage names none), so a charge can be recomputed from
the record. The prices' new dimensions (``citation``, ``inference_geo``) live in
``prices.dimensions`` (JSON text, revision 0018): no column.

Downgrade drops both columns: stored calls lose them (their charges stay as posted).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-08 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.add_column(
            sa.Column("citation_tokens", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
        batch.add_column(sa.Column("inference_geo", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("inference_geo")
        batch.drop_column("citation_tokens")
