"""Agreement with the majority is kept up to date by the workers: `projects.
agreement_cursor` is the newest answer the raters' figures include and
`agreement_updated_at` when they were computed, so a worker recomputes a project only
once new answers came. Plain ALTER TABLE on both databases.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ALTER TABLE (SQLite's batch mode would copy `projects`, and dropping the old
    # copy deletes every child row through ON DELETE CASCADE).
    op.add_column(
        "projects",
        sa.Column("agreement_cursor", sa.BigInteger(), server_default="0", nullable=False),
    )
    op.add_column(
        "projects", sa.Column("agreement_updated_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.execute("ALTER TABLE projects DROP COLUMN agreement_updated_at")
    op.execute("ALTER TABLE projects DROP COLUMN agreement_cursor")
