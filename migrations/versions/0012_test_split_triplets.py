"""Triplets a researcher uploads as a test split: never fitted, every model measured on
them (`triplets.is_test`). Adding a column with a constant default rewrites no rows on
PostgreSQL 11+ nor on SQLite, so this is instant on a log of millions of answers.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "triplets", sa.Column("is_test", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    # A partial index: empty until a test split is uploaded, and then only its rows.
    op.create_index(
        "ix_triplets_test_split",
        "triplets",
        ["project_id", "id"],
        postgresql_where=sa.text("is_test"),
        sqlite_where=sa.text("is_test"),
    )


def downgrade() -> None:
    op.drop_index("ix_triplets_test_split", table_name="triplets")
    with op.batch_alter_table("triplets") as batch:
        batch.drop_column("is_test")
