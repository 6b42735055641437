"""A study's questionnaire (a short form before or after the task) and each rater's
answers to it, with when they sent them.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _new_columns(postgres: bool) -> tuple[tuple[str, str, str], ...]:
    return (
        ("projects", "questionnaire", "JSONB" if postgres else "JSON"),
        ("raters", "questionnaire_answers", "JSONB" if postgres else "JSON"),
        ("raters", "questionnaire_at", "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"),
    )


# Plain ALTER TABLE on both databases: SQLite's batch mode would copy the tables, and
# dropping the old copy of `projects` deletes every child row through ON DELETE CASCADE.
def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table, column, kind in _new_columns(postgres):
        op.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table, column, _ in reversed(_new_columns(postgres)):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
