"""A study's longest session, the code and redirect of a session that runs out of time,
and when each rater's session did.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _new_columns(postgres: bool) -> tuple[tuple[str, str, str], ...]:
    return (
        ("projects", "max_session_minutes", "INTEGER"),
        ("projects", "timeout_code", "VARCHAR(64)"),
        ("projects", "timeout_url", "VARCHAR(500)"),
        ("raters", "timed_out_at", "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"),
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
