"""A study's quota (the places a recruiting platform sold: nobody new joins once they
are taken) and speeder screening (a minimum median time per answer, read from each
rater's median as the quality figures last measured it).

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEW_COLUMNS = (
    ("projects", "quota", "INTEGER"),
    ("projects", "min_median_response_ms", "INTEGER"),
    ("raters", "median_response_ms", "FLOAT"),
    ("raters", "timed_answers", "INTEGER NOT NULL DEFAULT 0"),
)


# Plain ALTER TABLE on both databases: SQLite's batch mode would copy the tables, and
# dropping the old copy of `projects` deletes every child row through ON DELETE CASCADE.
def upgrade() -> None:
    for table, column, kind in NEW_COLUMNS:
        op.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def downgrade() -> None:
    for table, column, _ in reversed(NEW_COLUMNS):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
