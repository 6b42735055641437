"""A code and redirect for raters who end early because nothing is left to ask them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("projects") as table:
        table.add_column(sa.Column("no_more_work_code", sa.String(64), nullable=True))
        table.add_column(sa.Column("no_more_work_url", sa.String(500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("projects") as table:
        table.drop_column("no_more_work_url")
        table.drop_column("no_more_work_code")
