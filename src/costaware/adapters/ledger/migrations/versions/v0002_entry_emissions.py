"""Emissions of every entry: ``kg_co2e_micros``, ``kwh_micros``, ``carbon_method``, ``carbon_source``.

Entries written before have no estimate: their kg and kWh stay NULL (unknown, never 0) and their method and
source empty. The columns are added in place (no table copy on SQLite); releases before the migrations
read the table by name and never see them, so ``schema_version`` stays 1.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

TABLE = "costaware_entries"


def upgrade() -> None:
    """Add the four emissions columns to the entries."""
    op.add_column(TABLE, sa.Column("kg_co2e_micros", sa.BigInteger(), nullable=True))
    op.add_column(TABLE, sa.Column("kwh_micros", sa.BigInteger(), nullable=True))
    op.add_column(TABLE, sa.Column("carbon_method", sa.String(512), nullable=False, server_default=""))
    op.add_column(TABLE, sa.Column("carbon_source", sa.String(128), nullable=False, server_default=""))


def downgrade() -> None:
    """Drop them (the estimates are lost; the costs are not)."""
    with op.batch_alter_table(TABLE) as batch:
        for name in ("carbon_source", "carbon_method", "kwh_micros", "kg_co2e_micros"):
            batch.drop_column(name)
