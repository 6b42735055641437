"""A retried upload or archive import is known by its body as well as its key:
uploads.body_digest and projects.import_digest hold the SHA-256 of the first request
(null for those made before: they replay as they did).

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0041"
down_revision: str | None = "0040"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE uploads ADD COLUMN body_digest VARCHAR(64)")
    op.execute("ALTER TABLE projects ADD COLUMN import_digest VARCHAR(64)")


def downgrade() -> None:
    op.execute("ALTER TABLE projects DROP COLUMN import_digest")
    op.execute("ALTER TABLE uploads DROP COLUMN body_digest")
