"""The rating settings' version a project's open proposals were made under, so that every
worker process can tell whether they are stale: each process kept that in its memory, and
with several workers (docker-compose's worker and trainer) each one refreshed the
proposals again after every fit.

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-28
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE on both databases: SQLite's batch mode would copy `projects`, and
# dropping the old copy deletes every child row through ON DELETE CASCADE.
def upgrade() -> None:
    op.execute("ALTER TABLE projects ADD COLUMN proposals_settings_version INTEGER")


def downgrade() -> None:
    op.execute("ALTER TABLE projects DROP COLUMN proposals_settings_version")
