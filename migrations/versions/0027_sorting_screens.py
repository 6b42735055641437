"""Sorting screens for CompRF builds: `builds.sort_size` (how many of a node's items one
screen shows beside its pivots; 1 = one triplet a screen) and `assignments.screen_id`
(the first assignment of the sorting screen an item was shown on), indexed where set.
closer_answer() hands a queue draw to the Python path while a build sorts (frozen in
sql/closer_answer_0027.sql). Plain ALTER TABLE on both databases.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def upgrade() -> None:
    # Plain ALTER TABLE: SQLite's batch mode would copy the tables, and dropping the old
    # copy deletes every child row through ON DELETE CASCADE.
    op.execute("ALTER TABLE builds ADD COLUMN sort_size SMALLINT DEFAULT 1 NOT NULL")
    big = "BIGINT" if op.get_bind().dialect.name == "postgresql" else "INTEGER"
    op.execute(f"ALTER TABLE assignments ADD COLUMN screen_id {big}")
    op.create_index(
        "ix_assignments_screen_id",
        "assignments",
        ["screen_id"],
        postgresql_where=sa.text("screen_id IS NOT NULL"),
        sqlite_where=sa.text("screen_id IS NOT NULL"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0027"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0025"))
    op.drop_index("ix_assignments_screen_id", table_name="assignments")
    op.execute("ALTER TABLE assignments DROP COLUMN screen_id")
    op.execute("ALTER TABLE builds DROP COLUMN sort_size")
