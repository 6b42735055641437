"""closer_answer() serves the query a rater holds ahead and leases the next one ahead
(its result gains the upcoming query): frozen in sql/closer_answer_0045.sql.

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-06
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0045"
down_revision: str | None = "0044"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A function's result type is replaced only by dropping it first.
_DROP_FUNCTION = (
    "DROP FUNCTION IF EXISTS closer_answer(text, text, bigint, text, integer, timestamptz, "
    "double precision, boolean, bigint[], integer)"
)


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_DROP_FUNCTION)
        op.execute(_answer_function("0045"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_DROP_FUNCTION)
        op.execute(_answer_function("0038"))
