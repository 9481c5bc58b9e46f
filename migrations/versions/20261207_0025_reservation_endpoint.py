"""The endpoint of each call: ``reservations.endpoint`` (``worker.core.readers.ENDPOINTS``: the
Responses API, legacy completions, embeddings, Anthropic's Messages API), NULL for chat
completions and for every row before it.

Downgrade drops the column (the calls stay; what endpoint they were made to is forgotten).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 17:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("reservations", sa.Column("endpoint", sa.String(length=32), nullable=True))


def downgrade() -> None:
    # Not batch mode: SQLite (3.35+) drops a plain column in place (see 0024).
    op.drop_column("reservations", "endpoint")
