"""Items that play (issue 56): an item's file may be a sound or a video, told apart by its
type; `items.clip_seconds` is the clip's length, read on upload (null for an image or no
file).

Revision ID: 0049
Revises: 0048
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0049"
down_revision: str | None = "0048"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("items", sa.Column("clip_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("items", "clip_seconds")
