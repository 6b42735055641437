"""Triplet uploads written in committed chunks and published at the end.

While `pending`, an upload's rows are in the table but read by nobody: ordered reads stop
below `first_triplet_id`, counts and exports leave the upload out. `touched_at` lets the
worker remove what a crashed upload left behind.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("uploads") as batch:
        batch.add_column(
            sa.Column("pending", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(
            sa.Column("first_triplet_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"))
        )
        batch.add_column(sa.Column("touched_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    with op.batch_alter_table("uploads") as batch:
        batch.drop_column("touched_at")
        batch.drop_column("first_triplet_id")
        batch.drop_column("pending")
