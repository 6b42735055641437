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

import importlib.util
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

_RETURNING = "RETURNING a.slot_id, a.anchor_id, a.lo_id, a.hi_id, a.left_is_lo INTO given;"
_INSERT = """        INSERT INTO triplets (project_id, anchor_id, closer_id, farther_id, source, rater_id,
                              query_id, response_time_ms, created_at)
        VALUES (who.project_id, given.anchor_id,
                CASE WHEN chosen_lo THEN given.lo_id ELSE given.hi_id END,
                CASE WHEN chosen_lo THEN given.hi_id ELSE given.lo_id END,
                'rater', who.rater_id, p_assignment, p_elapsed, p_now);"""


def _module(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def answer_function_of_0007() -> str:
    """closer_answer() as migration 0007 left it."""
    of_0007 = _module("closer_migration_0007", "0007_rater_sessions.py")
    return of_0007._answer_function_of_0005().replace(of_0007._BY_RATER, of_0007._BY_SESSION)


def answer_function() -> str:
    function = answer_function_of_0007()
    assert _RETURNING in function and _INSERT in function
    returning = _RETURNING.replace("a.left_is_lo INTO", "a.left_is_lo, a.purpose INTO")
    insert = _INSERT.replace(
        "query_id, response_time_ms, created_at)",
        "query_id, response_time_ms, created_at,\n                              adaptive)",
    ).replace(
        "p_assignment, p_elapsed, p_now);",
        f"p_assignment, p_elapsed, p_now,\n                given.purpose IN {ADAPTIVE_CODES});",
    )
    return function.replace(_RETURNING, returning).replace(_INSERT, insert)


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
        op.execute(answer_function())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(answer_function_of_0007())
    op.drop_index("ix_triplets_project_id_adaptive", table_name="triplets")
    with op.batch_alter_table("triplets") as batch:
        batch.drop_column("adaptive")
