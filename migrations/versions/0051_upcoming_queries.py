"""Screens that arrive whole (issue 54): an assignment keeps the rater's next query,
decided as it is served (`upcoming_*`), so that the rating page loads its items while
the rater answers; closer_answer() serves it and decides the one after (frozen in
sql/closer_answer_0051.sql).

Revision ID: 0051
Revises: 0050
Create Date: 2026-12-07
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0051"
down_revision: str | None = "0050"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _new_columns(postgres: bool) -> tuple[tuple[str, str], ...]:
    # Item ids: BIGINT on PostgreSQL, INTEGER on SQLite (app/models/_types.py: BigId).
    item = "BIGINT" if postgres else "INTEGER"
    return (
        ("upcoming_purpose", "SMALLINT"),
        ("upcoming_anchor_id", item),
        ("upcoming_lo_id", item),
        ("upcoming_hi_id", item),
        ("upcoming_screen", "JSONB" if postgres else "JSON"),
    )


# Its arguments and result change: the old function is dropped first (a call with the
# old arguments would otherwise still find it).
_DROP_0038 = (
    "DROP FUNCTION IF EXISTS closer_answer(text, text, bigint, text, integer, timestamptz, "
    "double precision, boolean, bigint[], integer)"
)
_DROP_0051 = (
    "DROP FUNCTION IF EXISTS closer_answer(text, text, bigint, text, integer, timestamptz, "
    "double precision, boolean, bigint[], integer, double precision, boolean, bigint[])"
)


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


# Plain ALTER TABLE on both databases: SQLite's batch mode would copy the table.
def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for column, kind in _new_columns(postgres):
        op.execute(f"ALTER TABLE assignments ADD COLUMN {column} {kind}")
    if postgres:
        op.execute(_DROP_0038)
        op.execute(_answer_function("0051"))


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute(_DROP_0051)
        op.execute(_answer_function("0038"))
    for column, _ in reversed(_new_columns(postgres)):
        op.execute(f"ALTER TABLE assignments DROP COLUMN {column}")
