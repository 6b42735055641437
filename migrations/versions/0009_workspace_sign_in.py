"""Signing in to the researcher's workspace: an email and password hash per researcher,
and the browsers signed in (web sessions).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("researchers") as batch:
        batch.add_column(sa.Column("email", sa.String(254)))
        batch.add_column(sa.Column("password_hash", sa.String(255)))
        batch.create_unique_constraint("uq_researchers_email", ["email"])
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column(
            "researcher_id",
            sa.Integer(),
            sa.ForeignKey(
                "researchers.id",
                name="fk_web_sessions_researcher_id_researchers",
                ondelete="CASCADE",
            ),
            nullable=False,
        ),
        sa.Column(
            "api_token_id",
            sa.Integer(),
            sa.ForeignKey(
                "api_tokens.id", name="fk_web_sessions_api_token_id_api_tokens", ondelete="CASCADE"
            ),
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_web_sessions"),
        sa.UniqueConstraint("key_hash", name="uq_web_sessions_key_hash"),
    )
    op.create_index("ix_web_sessions_researcher_id", "web_sessions", ["researcher_id"])
    op.create_index("ix_web_sessions_api_token_id", "web_sessions", ["api_token_id"])


def downgrade() -> None:
    op.drop_table("web_sessions")
    with op.batch_alter_table("researchers") as batch:
        batch.drop_constraint("uq_researchers_email", type_="unique")
        batch.drop_column("password_hash")
        batch.drop_column("email")
