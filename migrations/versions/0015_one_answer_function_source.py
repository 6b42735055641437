"""closer_answer() from its one source: the function's text now lives whole in
app/scheduling/closer_answer.sql (before, 0014 patched 0007's, which patched 0005's),
each enum code it uses marked with the Python enum it must equal. The function does
what 0014's did; this revision installs the marked text, frozen in
sql/closer_answer_0015.sql.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0015"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0014"))
