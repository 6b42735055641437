"""Rich item texts (issue 56): a study whose `text_markdown` is set shows its items'
texts as inline Markdown, rendered and sanitised (off for every study: plain text stays
plain).

Revision ID: 0050
Revises: 0049
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0050"
down_revision: str | None = "0049"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "projects",
        sa.Column("text_markdown", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("projects", "text_markdown")
