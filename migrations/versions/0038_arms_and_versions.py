"""A study's arms (conditions) and its locked design versions: the arm and version on
every rater, judgement and triplet, the versions' table, and closer_answer() recording
both (frozen in sql/closer_answer_0038.sql).

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0038"
down_revision: str | None = "0037"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _new_columns(postgres: bool) -> tuple[tuple[str, str, str], ...]:
    moment = "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"
    json = "JSONB" if postgres else "JSON"
    return (
        ("projects", "arms", json),
        ("projects", "design_version", "INTEGER DEFAULT 1 NOT NULL"),
        ("projects", "design_locked_at", moment),
        ("raters", "arm", "VARCHAR(64)"),
        ("raters", "design_version", "INTEGER"),
        ("judgements", "arm", "VARCHAR(64)"),
        ("judgements", "design_version", "INTEGER"),
        ("triplets", "arm", "VARCHAR(64)"),
        ("triplets", "design_version", "INTEGER"),
    )


# Its result gains the rater's arm: a function's result type is replaced only by
# dropping it first.
_DROP_FUNCTION = (
    "DROP FUNCTION IF EXISTS closer_answer(text, text, bigint, text, integer, timestamptz, "
    "double precision, boolean, bigint[], integer)"
)


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


# Plain ALTER TABLE on both databases: SQLite's batch mode would copy the tables, and
# dropping the old copy of `projects` deletes every child row through ON DELETE CASCADE.
def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table, column, kind in _new_columns(postgres):
        op.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
    moment = "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"
    json = "JSONB" if postgres else "JSON"
    op.execute(
        f"""CREATE TABLE design_versions (
            id {"SERIAL" if postgres else "INTEGER"} NOT NULL,
            project_id INTEGER NOT NULL,
            number INTEGER NOT NULL,
            design {json} NOT NULL,
            changes {json} NOT NULL,
            created_at {moment} NOT NULL,
            locked_at {moment},
            CONSTRAINT pk_design_versions PRIMARY KEY (id),
            CONSTRAINT fk_design_versions_project_id_projects FOREIGN KEY (project_id)
                REFERENCES projects (id) ON DELETE CASCADE
        )"""
    )
    op.execute(
        "CREATE UNIQUE INDEX uq_design_versions_project_id_number "
        "ON design_versions (project_id, number)"
    )
    if postgres:
        op.execute(_DROP_FUNCTION)
        op.execute(_answer_function("0038"))


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute(_DROP_FUNCTION)
        op.execute(_answer_function("0032"))
    op.execute("DROP TABLE design_versions")
    for table, column, _ in reversed(_new_columns(postgres)):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
