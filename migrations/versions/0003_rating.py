"""Rating: public links and rating settings per project, rater quality, the query queue
(one slot per wanted answer, leased to one rater at a time), served assignments with
their answers, and predictions routed through finished builds.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
OPEN = sa.text("state = 'open'")


def string_enum(name: str, *values: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, create_constraint=True)


def _project_columns() -> list[sa.Column]:
    return [
        sa.Column("instructions", sa.Text(), nullable=False, server_default=""),
        sa.Column(
            "question",
            sa.String(300),
            nullable=False,
            server_default="Which of the two is closer to the one on top?",
        ),
        sa.Column("allow_cant_tell", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("answers_per_rater", sa.Integer(), nullable=False, server_default="40"),
        sa.Column("completion_code", sa.String(64), nullable=True),
        sa.Column("completion_url", sa.String(500), nullable=True),
        sa.Column("random_share", sa.Float(), nullable=False, server_default="0.1"),
        sa.Column("attention_rate", sa.Float(), nullable=False, server_default="0.05"),
        sa.Column("lease_seconds", sa.Integer(), nullable=False, server_default="120"),
        sa.Column("min_attention_accuracy", sa.Float(), nullable=True),
        sa.Column("min_majority_agreement", sa.Float(), nullable=True),
        sa.Column("quality_min_answers", sa.Integer(), nullable=False, server_default="5"),
        sa.Column("settings_version", sa.Integer(), nullable=False, server_default="0"),
    ]


def _rater_columns() -> list[sa.Column]:
    zero = sa.text("0")
    return [
        sa.Column("session_hash", sa.String(64), nullable=True),
        sa.Column("platform_ids", JSON_VALUE, nullable=False, server_default=sa.text("'{}'")),
        sa.Column("answers", sa.Integer(), nullable=False, server_default=zero),
        sa.Column("attention_passed", sa.Integer(), nullable=False, server_default=zero),
        sa.Column("attention_failed", sa.Integer(), nullable=False, server_default=zero),
        sa.Column("majority_compared", sa.Integer(), nullable=False, server_default=zero),
        sa.Column("majority_agreement", sa.Float(), nullable=True),
        sa.Column("excluded", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("exclusion_reason", sa.Text(), nullable=False, server_default=""),
        sa.Column("exclusion_override", sa.Boolean(), nullable=True),
        sa.Column("completed_at", TIMESTAMP, nullable=True),
        sa.Column("last_seen_at", TIMESTAMP, nullable=True),
    ]


def upgrade() -> None:
    op.add_column("projects", sa.Column("public_slug", sa.String(32), nullable=True))
    for column in _project_columns():
        op.add_column("projects", column)
    connection = op.get_bind()
    projects = sa.table(
        "projects",
        sa.column("id", sa.Integer),
        sa.column("public_slug", sa.String),
        sa.column("completion_code", sa.String),
    )
    for (project_id,) in connection.execute(sa.select(projects.c.id)).all():
        connection.execute(
            projects.update()
            .where(projects.c.id == project_id)
            .values(
                public_slug=secrets.token_urlsafe(12),
                completion_code=secrets.token_hex(4).upper(),
            )
        )
    with op.batch_alter_table("projects") as batch:
        batch.alter_column("public_slug", existing_type=sa.String(32), nullable=False)
        batch.alter_column("completion_code", existing_type=sa.String(64), nullable=False)
        batch.create_unique_constraint(op.f("uq_projects_public_slug"), ["public_slug"])

    for column in _rater_columns():
        op.add_column("raters", column)
    with op.batch_alter_table("raters") as batch:
        batch.create_unique_constraint(op.f("uq_raters_session_hash"), ["session_hash"])

    op.create_table(
        "predictions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            string_enum("prediction_status", "routing", "complete", "cancelled"),
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
            name=op.f("fk_predictions_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["build_id"],
            ["builds.id"],
            name=op.f("fk_predictions_build_id_builds"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_predictions")),
    )
    op.create_index(op.f("ix_predictions_project_id"), "predictions", ["project_id"])

    op.create_table(
        "query_slots",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("prediction_id", sa.Integer(), nullable=True),
        sa.Column("query_key", sa.BigInteger(), nullable=False),
        sa.Column("anchor_id", BIG_ID, nullable=False),
        sa.Column("lo_id", BIG_ID, nullable=False),
        sa.Column("hi_id", BIG_ID, nullable=False),
        sa.Column(
            "state", string_enum("slot_state", "open", "answered", "withdrawn"), nullable=False
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
            ["prediction_id"],
            ["predictions.id"],
            name=op.f("fk_query_slots_prediction_id_predictions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_query_slots")),
    )
    op.create_index(
        "ix_query_slots_open",
        "query_slots",
        ["project_id", "priority", "id"],
        postgresql_where=OPEN,
        sqlite_where=OPEN,
    )
    op.create_index(
        "ix_query_slots_build_open",
        "query_slots",
        ["build_id", "query_key"],
        postgresql_where=OPEN,
        sqlite_where=OPEN,
    )
    op.create_index(
        "ix_query_slots_prediction_open",
        "query_slots",
        ["prediction_id", "query_key"],
        postgresql_where=OPEN,
        sqlite_where=OPEN,
    )

    op.create_table(
        "assignments",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("rater_id", sa.Integer(), nullable=False),
        sa.Column("slot_id", BIG_ID, nullable=True),
        sa.Column("purpose", sa.SmallInteger(), nullable=False),
        sa.Column("anchor_id", BIG_ID, nullable=False),
        sa.Column("lo_id", BIG_ID, nullable=False),
        sa.Column("hi_id", BIG_ID, nullable=False),
        sa.Column("left_is_lo", sa.Boolean(), nullable=False),
        sa.Column("served_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("answered_at", TIMESTAMP, nullable=True),
        sa.Column(
            "choice", string_enum("answer_choice", "left", "right", "cant_tell"), nullable=True
        ),
        sa.Column("response_time_ms", sa.Integer(), nullable=True),
        sa.Column("triplet_id", BIG_ID, nullable=True),
        sa.ForeignKeyConstraint(
            ["rater_id"],
            ["raters.id"],
            name=op.f("fk_assignments_rater_id_raters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_assignments")),
    )
    op.create_index(op.f("ix_assignments_project_id"), "assignments", ["project_id"])
    op.create_index(
        "uq_assignments_rater_query",
        "assignments",
        ["rater_id", "anchor_id", "lo_id", "hi_id"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_table("assignments")
    op.drop_table("query_slots")
    op.drop_table("predictions")
    with op.batch_alter_table("raters") as batch:
        batch.drop_constraint(op.f("uq_raters_session_hash"), type_="unique")
        for column in _rater_columns():
            batch.drop_column(column.name)
    with op.batch_alter_table("projects") as batch:
        batch.drop_constraint(op.f("uq_projects_public_slug"), type_="unique")
        batch.drop_column("public_slug")
        for column in _project_columns():
            batch.drop_column(column.name)
