"""`judgements`: one row per screen a person answered (or per uploaded judgement), kept as
shown and as answered, and `triplets.judgement_id`, the judgement a triplet was derived
from. New table and a nullable column, on both databases.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "judgements",
        sa.Column("id", BigId, primary_key=True),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column(
            "format",
            sa.Enum(
                "triplet",
                "odd_one_out",
                "rank",
                "sort",
                name="judgement_format",
                native_enum=False,
                create_constraint=True,
                length=11,
            ),
            nullable=False,
        ),
        sa.Column("context", Json, nullable=False),
        sa.Column("shown", Json, nullable=False),
        sa.Column("chosen", Json, nullable=False),
        sa.Column("rater_id", sa.Integer(), nullable=True),
        sa.Column("upload_id", sa.Integer(), nullable=True),
        sa.Column("response_time_ms", sa.Integer(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.current_timestamp(),
        ),
    )
    op.create_index("ix_judgements_project_id_id", "judgements", ["project_id", "id"])
    op.add_column("triplets", sa.Column("judgement_id", BigId, nullable=True))
    op.create_index(
        "ix_triplets_project_id_judged",
        "triplets",
        ["project_id", "id", "judgement_id"],
        postgresql_where=sa.text("judgement_id IS NOT NULL"),
        sqlite_where=sa.text("judgement_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_triplets_project_id_judged", table_name="triplets")
    op.execute("ALTER TABLE triplets DROP COLUMN judgement_id")
    op.drop_index("ix_judgements_project_id_id", table_name="judgements")
    op.drop_table("judgements")
