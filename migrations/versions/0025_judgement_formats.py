"""A study's judgement format: `projects.judgement` (triplet, odd_one_out, rank) with a
rank screen's `shown` and `picks`; an assignment's `format`, the items a screen showed
(`shown`, in display order), how many the rater picks (`picks`) and what they chose
(`chosen`). closer_answer() hands a
study of screens to the Python path (frozen in sql/closer_answer_0025.sql). Plain ALTER
TABLE on both databases.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27
"""

from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def upgrade() -> None:
    # Plain ALTER TABLE on both databases: SQLite's batch mode would copy `projects`, and
    # dropping the old copy deletes every child row through ON DELETE CASCADE.
    op.execute(
        "ALTER TABLE projects ADD COLUMN judgement VARCHAR(11) DEFAULT 'triplet' NOT NULL "
        "CONSTRAINT ck_projects_judgement "
        "CHECK (judgement IN ('triplet', 'odd_one_out', 'rank'))"
    )
    op.execute("ALTER TABLE projects ADD COLUMN shown INTEGER DEFAULT 8 NOT NULL")
    op.execute("ALTER TABLE projects ADD COLUMN picks INTEGER DEFAULT 2 NOT NULL")
    op.execute(
        "ALTER TABLE assignments ADD COLUMN format VARCHAR(11) DEFAULT 'triplet' NOT NULL "
        "CONSTRAINT ck_assignments_judgement_format "
        "CHECK (format IN ('triplet', 'odd_one_out', 'rank', 'sort'))"
    )
    json = "JSONB" if op.get_bind().dialect.name == "postgresql" else "JSON"
    op.execute(f"ALTER TABLE assignments ADD COLUMN shown {json}")
    op.execute("ALTER TABLE assignments ADD COLUMN picks SMALLINT")
    op.execute(f"ALTER TABLE assignments ADD COLUMN chosen {json}")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0025"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0021"))
    for column in ("chosen", "picks", "shown", "format"):
        op.execute(f"ALTER TABLE assignments DROP COLUMN {column}")
    for column in ("picks", "shown", "judgement"):
        op.execute(f"ALTER TABLE projects DROP COLUMN {column}")
