"""The participant's path around the task: a study's consent (its text and statements,
and their version), where a participant who declines is sent, the debrief shown with
the code; and each rater's answer to the consent (when, to which version, or declined).

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _new_columns(postgres: bool) -> tuple[tuple[str, str, str], ...]:
    return (
        ("projects", "consent", "JSONB" if postgres else "JSON"),
        ("projects", "consent_version", "INTEGER NOT NULL DEFAULT 0"),
        ("projects", "no_consent_code", "VARCHAR(64)"),
        ("projects", "no_consent_url", "VARCHAR(500)"),
        ("projects", "debrief", "TEXT NOT NULL DEFAULT ''"),
        ("raters", "consented_at", "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"),
        ("raters", "consent_version", "INTEGER"),
        ("raters", "consent_declined_at", "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"),
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
