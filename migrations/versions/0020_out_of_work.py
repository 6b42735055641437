"""`raters.out_of_work_at`: when a rater's session ended because nothing was left to ask
them (they were shown the no-more-work code), so the participants list can say which
raters to pay for that. Plain ALTER TABLE on both databases.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("raters", sa.Column("out_of_work_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE raters DROP COLUMN out_of_work_at")
