"""An index on items (project_id, id): the items page and API page through a project's
items in upload order by walking it (at 50,000 items the last page read every row).

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_items_project_id_id", "items", ["project_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_items_project_id_id", table_name="items")
