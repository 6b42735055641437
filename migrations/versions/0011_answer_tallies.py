"""Hourly answer tallies per project and source, kept by the worker up to a cursor, so
the workspace counts millions of answers by summing a few hundred rows.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "answer_tallies",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("answers", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_answer_tallies_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("project_id", "hour", "source", name="pk_answer_tallies"),
    )
    op.create_table(
        "answer_tally_cursors",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column(
            "through_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_answer_tally_cursors_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("project_id", name="pk_answer_tally_cursors"),
    )


def downgrade() -> None:
    op.drop_table("answer_tally_cursors")
    op.drop_table("answer_tallies")
