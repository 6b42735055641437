"""`projects.importing` and `projects.import_key`: a project made from an archive stays
hidden until its import ends (one whose importer died is removed whole), and a retried
import with the same Idempotency-Key finds the project it made. Plain ALTER TABLE and a
partial unique index, on both databases.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "projects",
        sa.Column("importing", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("projects", sa.Column("import_key", sa.String(length=100), nullable=True))
    op.create_index(
        "uq_projects_owner_id_import_key",
        "projects",
        ["owner_id", "import_key"],
        unique=True,
        postgresql_where=sa.text("import_key IS NOT NULL"),
        sqlite_where=sa.text("import_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_projects_owner_id_import_key", table_name="projects")
    op.execute("ALTER TABLE projects DROP COLUMN import_key")
    op.execute("ALTER TABLE projects DROP COLUMN importing")
