"""An index of the entries by ``reservation_id``: what each open hold has spent already.

A budget counts an open hold less what the entries it paid for have cost (a training's attempts, billed
while its hold stays open): read for every open hold at each budget check, so it needs the index. Releases
before read the table by name and never see it, so ``schema_version`` stays 1.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

TABLE = "costaware_entries"
INDEX = "ix_costaware_entries_reservation"


def upgrade() -> None:
    """Index the entries by the reservation they were paid from."""
    op.create_index(INDEX, TABLE, ["reservation_id"])


def downgrade() -> None:
    """Drop the index (budget checks read every entry of an open hold without it)."""
    op.drop_index(INDEX, table_name=TABLE)
