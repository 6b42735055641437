"""A routing is called a routing: the table `predictions` (new items routed down a
finished CompRF build) becomes `routings`, `query_slots.prediction_id` becomes
`routing_id`, with their keys, indexes and checks; queued routing steps name their
routing by the new key, and closer_answer() returns `routing_id` (frozen in
sql/closer_answer_0016.sql). `predictions` now means only what fitted models serve.

PostgreSQL renames in place. SQLite cannot rename a constraint, so it copies both
tables into new ones: the slots first, so that the old parent has no child left when it
is dropped (a drop with foreign keys on deletes through ON DELETE CASCADE).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
OPEN = sa.text("state = 'open'")
ROUTE_JOB = "comprf_routing_step"
ANSWER_FUNCTION_ARGUMENTS = (
    "text, text, bigint, text, integer, timestamptz, double precision, boolean, bigint[], integer"
)

# (table, its status check's name, the slots' column that points at it), before and after.
OLD = ("predictions", "prediction_status", "prediction_id")
NEW = ("routings", "routing_status", "routing_id")

ROUTING_COLUMNS = (
    "id, project_id, build_id, status, item_ids, answers, answers_cursor, progress, result, "
    "ask_raters, created_at, updated_at"
)
SLOT_COLUMNS = (
    "id, project_id, priority, build_id, {owner}, query_key, anchor_id, lo_id, hi_id, state, "
    "lease_rater_id, lease_expires_at, created_at"
)


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def upgrade() -> None:
    _rename(OLD, NEW, answer_function="0016")


def downgrade() -> None:
    _rename(NEW, OLD, answer_function="0015")


def _rename(old: tuple[str, str, str], new: tuple[str, str, str], answer_function: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS closer_answer({ANSWER_FUNCTION_ARGUMENTS})")
        _rename_in_place(old, new)
        op.execute(_answer_function(answer_function))
    else:
        _copy_into_new_tables(old, new)
    _rename_job_parameter(old[2], new[2])


def _rename_in_place(old: tuple[str, str, str], new: tuple[str, str, str]) -> None:
    (table, check, owner), (new_table, new_check, new_owner) = old, new
    op.execute(f"ALTER TABLE {table} RENAME TO {new_table}")
    op.execute(f"ALTER SEQUENCE {table}_id_seq RENAME TO {new_table}_id_seq")
    renamed_constraints = {
        f"pk_{table}": f"pk_{new_table}",
        f"ck_{table}_{check}": f"ck_{new_table}_{new_check}",
        f"fk_{table}_project_id_projects": f"fk_{new_table}_project_id_projects",
        f"fk_{table}_build_id_builds": f"fk_{new_table}_build_id_builds",
    }
    for name, new_name in renamed_constraints.items():
        op.execute(f"ALTER TABLE {new_table} RENAME CONSTRAINT {name} TO {new_name}")
    op.execute(f"ALTER INDEX ix_{table}_project_id RENAME TO ix_{new_table}_project_id")
    op.execute(f"ALTER TABLE query_slots RENAME COLUMN {owner} TO {new_owner}")
    op.execute(
        f"ALTER TABLE query_slots RENAME CONSTRAINT fk_query_slots_{owner}_{table} "
        f"TO fk_query_slots_{new_owner}_{new_table}"
    )
    op.execute(
        f"ALTER INDEX ix_query_slots_{table[:-1]}_open RENAME TO ix_query_slots_{new_table[:-1]}_open"
    )


def _copy_into_new_tables(old: tuple[str, str, str], new: tuple[str, str, str]) -> None:
    (table, _, owner), (new_table, new_check, new_owner) = old, new
    _create_routings(new_table, new_check)
    op.execute(f"INSERT INTO {new_table} ({ROUTING_COLUMNS}) SELECT {ROUTING_COLUMNS} FROM {table}")

    _create_slots("query_slots_copy", new_table, new_owner)
    op.execute(
        f"INSERT INTO query_slots_copy ({SLOT_COLUMNS.format(owner=new_owner)}) "
        f"SELECT {SLOT_COLUMNS.format(owner=owner)} FROM query_slots"
    )
    op.drop_table("query_slots")
    op.rename_table("query_slots_copy", "query_slots")
    _index_slots(new_table[:-1], new_owner)

    op.drop_index(f"ix_{table}_project_id", table_name=table)
    op.drop_table(table)


def _create_routings(table: str, check: str) -> None:
    op.create_table(
        table,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "routing",
                "complete",
                "cancelled",
                name=check,
                native_enum=False,
                create_constraint=True,
            ),
            nullable=False,
        ),
        sa.Column("item_ids", JSON_VALUE, nullable=False),
        sa.Column("answers", sa.LargeBinary(), nullable=False),
        sa.Column("answers_cursor", sa.BigInteger(), nullable=False),
        sa.Column("progress", JSON_VALUE, nullable=False),
        sa.Column("result", JSON_VALUE, nullable=True),
        sa.Column("ask_raters", sa.Boolean(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f(f"fk_{table}_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["build_id"],
            ["builds.id"],
            name=op.f(f"fk_{table}_build_id_builds"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{table}")),
    )
    op.create_index(f"ix_{table}_project_id", table, ["project_id"])


def _create_slots(name: str, owners: str, owner: str) -> None:
    # Constraint names as the table will be called once renamed to query_slots.
    op.create_table(
        name,
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column(owner, sa.Integer(), nullable=True),
        sa.Column("query_key", sa.BigInteger(), nullable=False),
        sa.Column("anchor_id", BIG_ID, nullable=False),
        sa.Column("lo_id", BIG_ID, nullable=False),
        sa.Column("hi_id", BIG_ID, nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "open",
                "answered",
                "withdrawn",
                name="slot_state",
                native_enum=False,
                create_constraint=False,
            ),
            nullable=False,
        ),
        sa.Column("lease_rater_id", sa.Integer(), nullable=True),
        sa.Column("lease_expires_at", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_query_slots_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["build_id"],
            ["builds.id"],
            name=op.f("fk_query_slots_build_id_builds"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            [owner],
            [f"{owners}.id"],
            name=op.f(f"fk_query_slots_{owner}_{owners}"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "state IN ('open', 'answered', 'withdrawn')", name=op.f("ck_query_slots_slot_state")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_query_slots")),
    )


def _index_slots(owner_noun: str, owner: str) -> None:
    for name, columns in (
        ("ix_query_slots_open", ["project_id", "priority", "id"]),
        ("ix_query_slots_build_open", ["build_id", "query_key"]),
        (f"ix_query_slots_{owner_noun}_open", [owner, "query_key"]),
    ):
        op.create_index(name, "query_slots", columns, postgresql_where=OPEN, sqlite_where=OPEN)


def _rename_job_parameter(name: str, new_name: str) -> None:
    """Routing steps queued (or kept in the jobs' history) name their routing anew."""
    jobs = sa.table(
        "jobs", sa.column("id", sa.Integer()), sa.column("kind"), sa.column("params", JSON_VALUE)
    )
    bind = op.get_bind()
    for job_id, params in bind.execute(
        sa.select(jobs.c.id, jobs.c.params).where(jobs.c.kind == ROUTE_JOB)
    ).all():
        if name in (params or {}):
            params = {(new_name if key == name else key): value for key, value in params.items()}
            bind.execute(sa.update(jobs).where(jobs.c.id == job_id).values(params=params))
