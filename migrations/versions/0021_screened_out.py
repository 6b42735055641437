"""A code for raters who fail the attention checks: `projects.screened_out_code` and
`screened_out_url`; with the code set, a rater who falls below the attention-check
threshold has their session end there (`raters.screened_out_at`), and closer_answer()
takes no more answers from them (frozen in sql/closer_answer_0021.sql). Plain ALTER
TABLE on both databases.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def upgrade() -> None:
    # Plain ALTER TABLE on both databases: SQLite's batch mode would copy `projects`, and
    # dropping the old copy deletes every child row through ON DELETE CASCADE.
    op.add_column("projects", sa.Column("screened_out_code", sa.String(64), nullable=True))
    op.add_column("projects", sa.Column("screened_out_url", sa.String(500), nullable=True))
    op.add_column("raters", sa.Column("screened_out_at", sa.DateTime(timezone=True), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0021"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0017"))
    op.execute("ALTER TABLE raters DROP COLUMN screened_out_at")
    op.execute("ALTER TABLE projects DROP COLUMN screened_out_url")
    op.execute("ALTER TABLE projects DROP COLUMN screened_out_code")
