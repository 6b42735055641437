"""The study link opens and closes: `projects.link_state` (closed, open, paused) and
`link_opened_at`. A new study's link is closed until the researcher opens it; the
studies that exist are open, as their links were. Plain ALTER TABLE on both databases
(SQLite 3.35 or later drops a column in place). closer_answer() serves no next query
while a link is not open (frozen in sql/closer_answer_0017.sql).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def upgrade() -> None:
    # Plain ALTER TABLE on both databases: SQLite's batch mode would copy `projects`, and
    # dropping the old copy deletes every child row through ON DELETE CASCADE.
    op.execute(
        "ALTER TABLE projects ADD COLUMN link_state VARCHAR(6) DEFAULT 'closed' NOT NULL "
        "CONSTRAINT ck_projects_link_state CHECK (link_state IN ('closed', 'open', 'paused'))"
    )
    op.add_column("projects", sa.Column("link_opened_at", TIMESTAMP, nullable=True))
    op.execute("UPDATE projects SET link_state = 'open', link_opened_at = created_at")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0017"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0016"))
    op.execute("ALTER TABLE projects DROP COLUMN link_opened_at")
    op.execute("ALTER TABLE projects DROP COLUMN link_state")
