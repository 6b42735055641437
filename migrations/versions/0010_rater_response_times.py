"""An index of each rater's answer times, so the workspace's raters table reads a
page of raters' median response times from the index alone.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_triplets_rater_id_response_time_ms",
        "triplets",
        ["rater_id", "response_time_ms"],
        postgresql_where=sa.text("rater_id IS NOT NULL"),
        sqlite_where=sa.text("rater_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_triplets_rater_id_response_time_ms", table_name="triplets")
