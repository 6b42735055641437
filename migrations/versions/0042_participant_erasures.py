"""Participants erased at their request: the study's record of each erasure, without
who it was (participant_erasures).

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-03
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0042"
down_revision: str | None = "0041"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    moment = "TIMESTAMP WITH TIME ZONE" if postgres else "DATETIME"
    op.execute(
        f"""CREATE TABLE participant_erasures (
            id {"SERIAL" if postgres else "INTEGER"} NOT NULL,
            project_id INTEGER NOT NULL,
            erased_at {moment} NOT NULL,
            erased_by INTEGER,
            outcome VARCHAR(32) NOT NULL,
            arm VARCHAR(64),
            held_place BOOLEAN NOT NULL,
            answers INTEGER NOT NULL,
            judgements INTEGER NOT NULL,
            practice_answers INTEGER NOT NULL,
            CONSTRAINT pk_participant_erasures PRIMARY KEY (id),
            CONSTRAINT fk_participant_erasures_project_id_projects FOREIGN KEY (project_id)
                REFERENCES projects (id) ON DELETE CASCADE,
            CONSTRAINT fk_participant_erasures_erased_by_researchers FOREIGN KEY (erased_by)
                REFERENCES researchers (id) ON DELETE SET NULL
        )"""
    )
    op.execute(
        "CREATE INDEX ix_participant_erasures_project_id ON participant_erasures (project_id)"
    )


def downgrade() -> None:
    op.execute("DROP TABLE participant_erasures")
