"""`researchers.sign_in_link_used_through`: a sign-in link signs in once (the newest used
link's making time; a link made then or before is refused). Plain ALTER TABLE on both
databases.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "researchers", sa.Column("sign_in_link_used_through", sa.BigInteger(), nullable=True)
    )


def downgrade() -> None:
    op.execute("ALTER TABLE researchers DROP COLUMN sign_in_link_used_through")
