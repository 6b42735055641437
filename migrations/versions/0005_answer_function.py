"""The raters' usual answer as one PostgreSQL function: answer, count, next query, triplet.

An answer through the Python scheduler is about ten statements, each a round trip that
costs the web process and the server more than its work does. `closer_answer()` runs
the common case (a rater answers the unanswered, non-check query they were served) in
one call, in the same order and with the same rules as `app/scheduling/service.py`; it
returns `outcome = 'full'` without writing anything for every other case (a retry, an
attention check, an unknown query, an unknown session), which the Python path then
handles. SQLite has no functions: it always takes the Python path.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The function as this revision installs it, frozen (its live text:
# app/scheduling/closer_answer.sql).
ANSWER_FUNCTION = (Path(__file__).parent / "sql" / "closer_answer_0005.sql").read_text()


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(ANSWER_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "DROP FUNCTION IF EXISTS closer_answer(text, text, bigint, text, integer, "
            "timestamptz, double precision, boolean, bigint[], integer)"
        )
