"""The rater pages' languages (issue 56): a study names the languages its pages speak
(`projects.languages`, English for the studies that exist, as today) and may word any
rater-facing string its own way (`projects.texts`, by language and English source).

Revision ID: 0048
Revises: 0047
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0048"
down_revision: str | None = "0047"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # Plain ALTER TABLE on both databases (SQLite's batch mode would copy `projects`).
    op.add_column(
        "projects", sa.Column("languages", JSON_VALUE, server_default='["en"]', nullable=False)
    )
    op.add_column("projects", sa.Column("texts", JSON_VALUE, server_default="{}", nullable=False))


def downgrade() -> None:
    op.drop_column("projects", "texts")
    op.drop_column("projects", "languages")
