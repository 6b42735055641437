"""A build records the raters whose answers it left out (`builds.excluded_rater_ids`),
as of its last replay: a finished build is not replayed when a rater is excluded or
included again later, and the Builds page says so and offers to build it again. The
builds that exist take their project's exclusions of today.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    # Plain ALTER TABLE on both databases (SQLite's batch mode would copy `builds`).
    op.add_column(
        "builds",
        sa.Column("excluded_rater_ids", JSON_VALUE, server_default="[]", nullable=False),
    )
    bind = op.get_bind()
    excluded: dict[int, list[int]] = {}
    for project_id, rater_id in bind.execute(
        sa.text("SELECT project_id, id FROM raters WHERE excluded ORDER BY id")
    ):
        excluded.setdefault(project_id, []).append(rater_id)
    value = "CAST(:ids AS JSONB)" if bind.dialect.name == "postgresql" else ":ids"
    for project_id, rater_ids in excluded.items():
        bind.execute(
            sa.text(f"UPDATE builds SET excluded_rater_ids = {value} WHERE project_id = :project"),
            {"ids": json.dumps(rater_ids), "project": project_id},
        )


def downgrade() -> None:
    op.execute("ALTER TABLE builds DROP COLUMN excluded_rater_ids")
