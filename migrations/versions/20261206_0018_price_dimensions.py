"""Price dimensions beyond the token kinds: ``prices.dimensions``, and their counts on usage records.

``prices.dimensions`` holds, as JSON text, what a row prices beyond its seven token columns
(``worker.core.prices.price.dimensions_to_json``): 1-hour cache writes, image input, the web search fee
by context size, off-peak rates and their windows, and the source keys the book does not apply.
'' for a row without them, which every existing row becomes: it prices no 1-hour cache write and no
web search (a call with either is unpriced, as it was), images at its input price (as the usage
reader charged them before), and has no off-peak hours (as before).

``usage_records`` gains ``cache_write_1h_tokens`` (a part of ``cache_write_tokens``),
``image_prompt_tokens`` (a part of ``prompt_tokens``) and ``web_search_requests`` (0 on existing
rows), ``search_context_size`` (NULL), and ``unit_prices``: the rates the call was charged at, as
JSON text (``worker.core.prices.price.Price.unit_prices``; NULL on rows written before this revision).

Downgrade drops the columns: stored rows lose their dimensions (calls with them unpriced again).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 22:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COUNTS = ("cache_write_1h_tokens", "image_prompt_tokens", "web_search_requests")


def upgrade() -> None:
    with op.batch_alter_table("prices") as batch:
        batch.add_column(sa.Column("dimensions", sa.Text(), server_default="", nullable=False))
    with op.batch_alter_table("usage_records") as batch:
        for column in COUNTS:
            batch.add_column(
                sa.Column(column, sa.Integer(), server_default=sa.text("0"), nullable=False)
            )
        batch.add_column(sa.Column("search_context_size", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("unit_prices", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("unit_prices")
        batch.drop_column("search_context_size")
        for column in reversed(COUNTS):
            batch.drop_column(column)
    with op.batch_alter_table("prices") as batch:
        batch.drop_column("dimensions")
