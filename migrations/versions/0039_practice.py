"""Practice screens before the task: the study's practice (projects.practice), each
rater's practice tally and when they fell short of its pass mark, and their practice
answers, kept apart from the study's answers (practice_answers).

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0039"
down_revision: str | None = "0038"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _new_columns(postgres: bool) -> tuple[tuple[str, str, str], ...]:
    moment = "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"
    return (
        ("projects", "practice", "JSONB" if postgres else "JSON"),
        ("raters", "practice_answered", "INTEGER DEFAULT 0 NOT NULL"),
        ("raters", "practice_correct", "INTEGER DEFAULT 0 NOT NULL"),
        ("raters", "practice_failed_at", moment),
    )


# Plain ALTER TABLE on both databases: SQLite's batch mode would copy the tables, and
# dropping the old copy of `projects` deletes every child row through ON DELETE CASCADE.
def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table, column, kind in _new_columns(postgres):
        op.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    moment = "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"
    json = "JSONB" if postgres else "JSON"
    op.execute(
        f"""CREATE TABLE practice_answers (
            id {"SERIAL" if postgres else "INTEGER"} NOT NULL,
            project_id INTEGER NOT NULL,
            rater_id INTEGER NOT NULL,
            trial INTEGER NOT NULL,
            shown {json} NOT NULL,
            expected {json} NOT NULL,
            given {json} NOT NULL,
            correct BOOLEAN NOT NULL,
            response_time_ms INTEGER,
            arm VARCHAR(64),
            design_version INTEGER,
            created_at {moment} NOT NULL,
            CONSTRAINT pk_practice_answers PRIMARY KEY (id),
            CONSTRAINT fk_practice_answers_project_id_projects FOREIGN KEY (project_id)
                REFERENCES projects (id) ON DELETE CASCADE,
            CONSTRAINT fk_practice_answers_rater_id_raters FOREIGN KEY (rater_id)
                REFERENCES raters (id) ON DELETE CASCADE,
            CONSTRAINT uq_practice_answers_rater_id_trial UNIQUE (rater_id, trial)
        )"""
    )
    op.execute("CREATE INDEX ix_practice_answers_project_id ON practice_answers (project_id)")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute("DROP TABLE practice_answers")
    for table, column, _ in reversed(_new_columns(postgres)):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
