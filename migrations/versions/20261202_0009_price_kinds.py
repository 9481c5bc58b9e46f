"""Prices per kind of token, per service tier and per provider; aliases, context limits, provenance.

``pattern`` becomes ``model``: an exact name. Every existing row is an ``override`` row for any
provider ('') and the default tier, except the prefix rows (a pattern ending in ``*``), which no
longer price anything: they stay, as history, in layer ``retired``, which the book does not read
(re-import their prices as exact names or aliases). The new price columns are NULL
(a kind the row does not price); ``until``, the context limits and ``reason`` are NULL; ``source``
is ''. The unique key becomes (layer, model, provider, tier, effective_from).

Revision ID: 0009
Revises: 0005
Create Date: 2026-12-02 04:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PRICE = sa.String(length=40)
OLD_KEY = "uq_prices_pattern_effective_from"
NEW_KEY = "uq_prices_layer_model_provider_tier_effective_from"


def upgrade() -> None:
    with op.batch_alter_table("prices") as batch:
        batch.drop_constraint(OLD_KEY, type_="unique")
        batch.alter_column(
            "pattern", new_column_name="model", existing_type=sa.String(200), nullable=False
        )
        batch.add_column(
            sa.Column("layer", sa.String(16), server_default="override", nullable=False)
        )
        batch.add_column(sa.Column("provider", sa.String(100), server_default="", nullable=False))
        batch.add_column(sa.Column("tier", sa.String(32), server_default="default", nullable=False))
        batch.add_column(sa.Column("until", sa.DateTime(timezone=True), nullable=True))
        for kind in ("cache_write", "reasoning", "audio_input", "audio_output"):
            batch.add_column(sa.Column(kind, PRICE, nullable=True))
        batch.add_column(sa.Column("aliases", sa.Text(), server_default="", nullable=False))
        batch.add_column(
            sa.Column("snapshots", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        for limit in ("max_input_tokens", "max_output_tokens", "prompt_limit"):
            batch.add_column(sa.Column(limit, sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("source", sa.Text(), server_default="", nullable=False))
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))
    op.execute("UPDATE prices SET layer = 'retired' WHERE model LIKE '%*'")
    with op.batch_alter_table("prices") as batch:
        batch.create_unique_constraint(
            NEW_KEY, ["layer", "model", "provider", "tier", "effective_from"]
        )


def downgrade() -> None:
    # Rows that differ only in what this revision added cannot share the old key: keep the
    # default-tier override row for any provider, which is what the old book could express.
    op.execute("UPDATE prices SET layer = 'override' WHERE layer = 'retired'")
    op.execute(
        "DELETE FROM prices WHERE layer <> 'override' OR provider <> '' OR tier <> 'default'"
    )
    with op.batch_alter_table("prices") as batch:
        batch.drop_constraint(NEW_KEY, type_="unique")
        for column in (
            "reason",
            "source",
            "prompt_limit",
            "max_output_tokens",
            "max_input_tokens",
            "snapshots",
            "aliases",
            "audio_output",
            "audio_input",
            "reasoning",
            "cache_write",
            "until",
            "tier",
            "provider",
            "layer",
        ):
            batch.drop_column(column)
        batch.alter_column(
            "model", new_column_name="pattern", existing_type=sa.String(200), nullable=False
        )
    with op.batch_alter_table("prices") as batch:
        batch.create_unique_constraint(OLD_KEY, ["pattern", "effective_from"])
