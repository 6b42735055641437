"""Repeated triplet questions (issue 57): a triplet study repeats a share of its random
questions to several raters for the noise ceiling, as screen studies repeat screens.
Their assignments carry purpose 6 (`Purpose.repeat`), counted per question through a
partial index that holds them alone. The triplet studies that exist repeat none (what
their raters are asked does not change under them): their `repeat_share`, which did
nothing for them until now, is set to 0.

Revision ID: 0047
Revises: 0046
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0047"
down_revision: str | None = "0046"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_assignments_repeated",
        "assignments",
        ["project_id", "anchor_id", "lo_id", "hi_id"],
        postgresql_where=sa.text("purpose = 6"),
        sqlite_where=sa.text("purpose = 6"),
    )
    op.execute("UPDATE projects SET repeat_share = 0 WHERE judgement = 'triplet'")


def downgrade() -> None:
    # A repeated question is a random one to the code before it.
    op.execute("UPDATE assignments SET purpose = 3 WHERE purpose = 6")
    op.drop_index("ix_assignments_repeated", table_name="assignments")
