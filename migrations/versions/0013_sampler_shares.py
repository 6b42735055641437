"""How the adaptive part of raters' time is split among the samplers (issue 17): a
project's labelling, embedding and placement shares (null: chosen from the project's
models and items). Nullable columns without a default rewrite no rows.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SHARES = ("labelling_share", "embedding_share", "placement_share")


def upgrade() -> None:
    for name in SHARES:
        op.add_column("projects", sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("projects") as batch:
        for name in SHARES:
            batch.drop_column(name)
