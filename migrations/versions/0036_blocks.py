"""A session's answers in blocks, with a break of at least `break_seconds` between them.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE on both databases: SQLite's batch mode would copy `projects`, and
# dropping the old copy deletes every child row through ON DELETE CASCADE.
def upgrade() -> None:
    op.execute("ALTER TABLE projects ADD COLUMN blocks INTEGER NOT NULL DEFAULT 1")
    op.execute("ALTER TABLE projects ADD COLUMN break_seconds INTEGER NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE projects DROP COLUMN break_seconds")
    op.execute("ALTER TABLE projects DROP COLUMN blocks")
