"""An index of judgements by upload: a judgement file's rows are taken out with it (a
rejected or abandoned upload) and the uploads page names it, without reading every
judgement of the project. Partial (uploaded judgements only), on both databases.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_judgements_upload_id",
        "judgements",
        ["upload_id"],
        postgresql_where=sa.text("upload_id IS NOT NULL"),
        sqlite_where=sa.text("upload_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_judgements_upload_id", table_name="judgements")
