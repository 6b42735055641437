"""Scoped API tokens: what a token may do (predict, read, write, admin), the projects it
may touch, when it expires, and what made it (the token, or the browser session), so
that revoking the maker revokes it too. Tokens made before were the whole account: they
stay so (admin, all projects, no expiry).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-01
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEW_COLUMNS = ("made_in_session_id", "made_by_token_id", "expires_at", "all_projects", "scope")


def _new_columns() -> list[sa.Column]:
    return [
        sa.Column(
            "scope",
            sa.Enum(
                "predict",
                "read",
                "write",
                "admin",
                name="token_scope",
                native_enum=False,
                create_constraint=True,
                length=7,
            ),
            nullable=False,
            server_default="admin",
        ),
        sa.Column("all_projects", sa.Boolean(), nullable=False, server_default=sa.true()),
        sa.Column("expires_at", sa.DateTime(timezone=True)),
        sa.Column(
            "made_by_token_id",
            sa.Integer(),
            sa.ForeignKey(
                "api_tokens.id",
                name="fk_api_tokens_made_by_token_id_api_tokens",
                ondelete="SET NULL",
            ),
        ),
        sa.Column(
            "made_in_session_id",
            sa.Integer(),
            sa.ForeignKey(
                "web_sessions.id",
                name="fk_api_tokens_made_in_session_id_web_sessions",
                ondelete="SET NULL",
            ),
        ),
    ]


@contextmanager
def _keeping_browsers_signed_in() -> Iterator[None]:
    """SQLite alters `api_tokens` by copying it, and dropping the old copy deletes the
    browser sessions opened with a token (ON DELETE CASCADE): they are put back after."""
    op.execute(
        "CREATE TEMPORARY TABLE kept_web_sessions AS "
        "SELECT * FROM web_sessions WHERE api_token_id IS NOT NULL"
    )
    yield
    op.execute("INSERT INTO web_sessions SELECT * FROM kept_web_sessions")
    op.execute("DROP TABLE kept_web_sessions")


def upgrade() -> None:
    if _postgresql():
        for column in _new_columns():
            op.add_column("api_tokens", column)
    else:
        with _keeping_browsers_signed_in(), op.batch_alter_table("api_tokens") as batch:
            for column in _new_columns():
                batch.add_column(column)
    op.create_index("ix_api_tokens_made_by_token_id", "api_tokens", ["made_by_token_id"])
    op.create_index("ix_api_tokens_made_in_session_id", "api_tokens", ["made_in_session_id"])
    op.create_table(
        "api_token_projects",
        sa.Column(
            "token_id",
            sa.Integer(),
            sa.ForeignKey(
                "api_tokens.id",
                name="fk_api_token_projects_token_id_api_tokens",
                ondelete="CASCADE",
            ),
            nullable=False,
        ),
        sa.Column(
            "project_id",
            sa.Integer(),
            sa.ForeignKey(
                "projects.id", name="fk_api_token_projects_project_id_projects", ondelete="CASCADE"
            ),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("token_id", "project_id", name="pk_api_token_projects"),
    )
    op.create_index("ix_api_token_projects_project_id", "api_token_projects", ["project_id"])


def downgrade() -> None:
    # The old schema has one kind of token, the whole account: a scoped, limited or
    # expiring token would become one, so those are revoked first.
    op.execute(
        "UPDATE api_tokens SET revoked_at = CURRENT_TIMESTAMP WHERE revoked_at IS NULL "
        "AND (scope != 'admin' OR NOT all_projects OR expires_at IS NOT NULL)"
    )
    op.drop_table("api_token_projects")
    op.drop_index("ix_api_tokens_made_in_session_id", "api_tokens")
    op.drop_index("ix_api_tokens_made_by_token_id", "api_tokens")
    if _postgresql():
        for column in NEW_COLUMNS:
            op.drop_column("api_tokens", column)
        return
    with _keeping_browsers_signed_in(), op.batch_alter_table("api_tokens") as batch:
        batch.drop_constraint(op.f("ck_api_tokens_token_scope"), type_="check")
        for column in NEW_COLUMNS:
            batch.drop_column(column)


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"
