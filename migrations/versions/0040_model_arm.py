"""A model may be fitted on one arm's answers (models.arm; null: every arm's).

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0040"
down_revision: str | None = "0039"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE models ADD COLUMN arm VARCHAR(64)")


def downgrade() -> None:
    op.execute("ALTER TABLE models DROP COLUMN arm")
