"""Which answers were chosen adaptively (issue 17): `triplets.adaptive` is true for an
answer to a question a scheduler chose for what it would teach (a CompRF build or
routing step, a majority repeat, a sampler's proposal), false for uniformly random ones,
attention-free uploads and oracle answers. Held-out errors are measured on the others
only: adaptive questions lean towards hard ones, and an error measured on them is
biased. Existing rows are marked from their assignments; the PostgreSQL answer function
marks new ones as the Python scheduler does.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Purpose codes (app/models/queue.py) as they stand at this revision: routing 0, build 1,
# majority 2, proposal 5.
ADAPTIVE_CODES = "(0, 1, 2, 5)"


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen: this one marks the answer's
    triplet adaptive from its assignment's purpose."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def upgrade() -> None:
    op.add_column(
        "triplets",
        sa.Column("adaptive", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.execute(
        "UPDATE triplets SET adaptive = TRUE WHERE query_id IN "
        f"(SELECT id FROM assignments WHERE purpose IN {ADAPTIVE_CODES})"
    )
    # A fit reads the few adaptive ids of a project through this index alone.
    op.create_index(
        "ix_triplets_project_id_adaptive",
        "triplets",
        ["project_id", "id"],
        postgresql_where=sa.text("adaptive"),
        sqlite_where=sa.text("adaptive"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0014"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0007"))
    op.drop_index("ix_triplets_project_id_adaptive", table_name="triplets")
    with op.batch_alter_table("triplets") as batch:
        batch.drop_column("adaptive")
