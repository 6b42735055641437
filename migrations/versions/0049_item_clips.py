"""Items that play (issue 56): an item's file may be a sound or a video, told apart by its
type; `items.clip_seconds` is the clip's length, read on upload (null for an image or no
file); `assignments.plays` counts how often the rater played each item of a screen before
answering; a study's `play_to_end` holds the answer back until every clip was heard whole
(true for new studies; the studies that exist have no clips); `items.alt` is what a
screen reader says for an item's image or clip (null: its text, else its key).

Revision ID: 0049
Revises: 0048
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0049"
down_revision: str | None = "0048"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("items", sa.Column("clip_seconds", sa.Float(), nullable=True))
    op.add_column("items", sa.Column("alt", sa.Text(), nullable=True))
    op.add_column("assignments", sa.Column("plays", JSON_VALUE, nullable=True))
    op.add_column(
        "projects",
        sa.Column("play_to_end", sa.Boolean(), nullable=False, server_default=sa.true()),
    )


def downgrade() -> None:
    op.drop_column("projects", "play_to_end")
    op.drop_column("assignments", "plays")
    op.drop_column("items", "alt")
    op.drop_column("items", "clip_seconds")
