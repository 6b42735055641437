"""A build's saved state is stored as it is on PostgreSQL: it is deflated already, and
the server's own compression of it (pglz, on every save: 45 MB at 50,000 items and 5 M
answers) took the database's CPU from the raters' answers for nothing.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE builds ALTER COLUMN state SET STORAGE EXTERNAL")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE builds ALTER COLUMN state SET STORAGE EXTENDED")
