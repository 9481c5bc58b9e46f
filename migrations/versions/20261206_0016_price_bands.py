"""Long-context bands on stored prices: ``prices.bands``.

A row's long-context rates (``worker.core.prices.price.Band``: from a prompt of more than ``above``
tokens on, the whole call at the band's rates) as JSON text, the rates as decimal strings
(``bands_to_json``); '' for a row without bands, which every existing row becomes: rows imported
before this revision keep their ``prompt_limit``, so a longer prompt stays unpriced until a row with
bands is imported (from a later ``--effective-from``: a stored row never changes).

Downgrade drops the column: rows lose their bands and a prompt past their ``prompt_limit`` is
unpriced again (never charged at the shorter prompts' rates).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 21:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("prices") as batch:
        batch.add_column(sa.Column("bands", sa.Text(), server_default="", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("prices") as batch:
        batch.drop_column("bands")
