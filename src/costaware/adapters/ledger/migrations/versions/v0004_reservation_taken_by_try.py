"""The try that took each reservation up: ``costaware_reservations.taken_by_try``.

A remote training's try takes its task's hold up as it starts (sizing it from what the ledger shows its
earlier tries billed). A bill of that try written late (a kill's, kept in the spool while the ledger was
down) is paid from the hold without growing it back: the try that would have used the growth is over,
and the next one sizes the hold with the bill in the ledger. A bill of an earlier try than the one that
took the hold still grows it back (that try sized it without the bill). NULL (every row before, and holds no
try took up) grows back as before. ``schema_version`` stays 1: releases before the migrations read only it
and ignore the column; releases with migrations refuse a ledger at a newer revision (docs/ledger.md), so
upgrade every process that writes a ledger together.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

TABLE = "costaware_reservations"
COLUMN = "taken_by_try"


def upgrade() -> None:
    """Add the nullable column (no default: the rows before it say no try)."""
    op.add_column(TABLE, sa.Column(COLUMN, sa.Integer(), nullable=True))


def downgrade() -> None:
    """Drop the column (late bills then grow every hold back, as before it)."""
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_column(COLUMN)
