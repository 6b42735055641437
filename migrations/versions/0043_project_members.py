"""A project's members and the invitations that make them (project_members,
project_invitations).

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0043"
down_revision: str | None = "0042"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLES = "role IN ('owner', 'editor', 'viewer')"


def _researcher(column: str, table: str) -> sa.Column:
    return sa.Column(
        column,
        sa.Integer,
        sa.ForeignKey(
            "researchers.id", ondelete="SET NULL", name=f"fk_{table}_{column}_researchers"
        ),
    )


def _project(table: str) -> sa.Column:
    return sa.Column(
        "project_id",
        sa.Integer,
        sa.ForeignKey("projects.id", ondelete="CASCADE", name=f"fk_{table}_project_id_projects"),
        nullable=False,
    )


def upgrade() -> None:
    moment = sa.DateTime(timezone=True)
    op.create_table(
        "project_members",
        sa.Column("id", sa.Integer, primary_key=True),
        _project("project_members"),
        sa.Column(
            "researcher_id",
            sa.Integer,
            sa.ForeignKey(
                "researchers.id",
                ondelete="CASCADE",
                name="fk_project_members_researcher_id_researchers",
            ),
            nullable=False,
        ),
        sa.Column("role", sa.String(6), nullable=False),
        sa.Column("sees_participants", sa.Boolean, nullable=False),
        sa.Column("added_at", moment, nullable=False),
        _researcher("added_by", "project_members"),
        sa.PrimaryKeyConstraint("id", name="pk_project_members"),
        sa.UniqueConstraint("project_id", "researcher_id", name="uq_project_members_project_id"),
        sa.CheckConstraint(ROLES, name="ck_project_members_member_role"),
    )
    op.create_index("ix_project_members_project_id", "project_members", ["project_id"])
    op.create_index("ix_project_members_researcher_id", "project_members", ["researcher_id"])
    op.create_table(
        "project_invitations",
        sa.Column("id", sa.Integer, primary_key=True),
        _project("project_invitations"),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("role", sa.String(6), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        _researcher("invited_by", "project_invitations"),
        sa.Column("created_at", moment, nullable=False),
        sa.Column("expires_at", moment, nullable=False),
        sa.Column("accepted_at", moment),
        _researcher("accepted_by", "project_invitations"),
        sa.Column("revoked_at", moment),
        sa.PrimaryKeyConstraint("id", name="pk_project_invitations"),
        sa.UniqueConstraint("secret_hash", name="uq_project_invitations_secret_hash"),
        sa.CheckConstraint(ROLES, name="ck_project_invitations_invitation_role"),
    )
    op.create_index("ix_project_invitations_project_id", "project_invitations", ["project_id"])


def downgrade() -> None:
    op.drop_table("project_invitations")
    op.drop_table("project_members")
