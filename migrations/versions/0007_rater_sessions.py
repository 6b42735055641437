"""Sessions of their own: a second join with a participant id no longer revokes the first.

The token hash moves from `raters.session_hash` (one per rater, replaced at each join) to
`rater_sessions` (any number per rater), and `closer_answer()` finds the rater through it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def upgrade() -> None:
    op.create_table(
        "rater_sessions",
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("rater_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["rater_id"],
            ["raters.id"],
            name=op.f("fk_rater_sessions_rater_id_raters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_rater_sessions")),
    )
    op.create_index(op.f("ix_rater_sessions_rater_id"), "rater_sessions", ["rater_id"])
    op.execute(
        "INSERT INTO rater_sessions (token_hash, rater_id, created_at) "
        "SELECT session_hash, id, COALESCE(last_seen_at, created_at) FROM raters "
        "WHERE session_hash IS NOT NULL"
    )
    with op.batch_alter_table("raters") as batch:
        batch.drop_constraint(op.f("uq_raters_session_hash"), type_="unique")
        batch.drop_column("session_hash")
    if op.get_bind().dialect.name == "postgresql":
        # It finds the rater through rater_sessions now.
        op.execute(_answer_function("0007"))


def downgrade() -> None:
    with op.batch_alter_table("raters") as batch:
        batch.add_column(sa.Column("session_hash", sa.String(64), nullable=True))
        batch.create_unique_constraint(op.f("uq_raters_session_hash"), ["session_hash"])
    # One session per rater again: the newest stays valid.
    op.execute(
        "UPDATE raters SET session_hash = (SELECT s.token_hash FROM rater_sessions s "
        "WHERE s.rater_id = raters.id ORDER BY s.created_at DESC, s.token_hash LIMIT 1)"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0005"))
    op.drop_index(op.f("ix_rater_sessions_rater_id"), table_name="rater_sessions")
    op.drop_table("rater_sessions")
