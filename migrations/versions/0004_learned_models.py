"""Learned models and their versions: the passive learners' fits and what serves predictions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def _enum(name: str, *values: str) -> sa.Enum:
    return sa.Enum(
        *values,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=max(len(value) for value in values),
    )


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column(
            "kind",
            _enum("model_kind", "tripletboost", "tete", "comprf", "smerf", "disdf"),
            nullable=False,
        ),
        sa.Column("params", JSON_VALUE, nullable=False),
        sa.Column("auto_refit", sa.Boolean(), nullable=False),
        sa.Column("refit_growth", sa.Double(), nullable=False),
        sa.Column("min_answers", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("inputs", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["build_id"], ["builds.id"], name="fk_models_build_id_builds", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name="fk_models_project_id_projects",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_models"),
        sa.UniqueConstraint("project_id", "name", name="uq_models_project_id_name"),
    )
    op.create_index("ix_models_project_id", "models", ["project_id"])
    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            _enum("version_status", "queued", "training", "ready", "failed", "cancelled"),
            nullable=False,
        ),
        sa.Column("trigger", sa.String(length=20), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("params", JSON_VALUE, nullable=False),
        sa.Column("answers_count", sa.BigInteger(), nullable=False),
        sa.Column("answers_cutoff", sa.BigInteger(), nullable=False),
        sa.Column("heldout_count", sa.BigInteger(), nullable=False),
        sa.Column("n_items", sa.Integer(), nullable=False),
        sa.Column("metrics", JSON_VALUE, nullable=False),
        sa.Column("warm_start_from", sa.Integer(), nullable=True),
        sa.Column("artifact", sa.LargeBinary(), nullable=True),
        sa.Column("artifact_bytes", sa.BigInteger(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("fitted_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_model_versions_job_id_jobs", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name="fk_model_versions_model_id_models",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_model_versions"),
        sa.UniqueConstraint("model_id", "number", name="uq_model_versions_model_id_number"),
    )
    op.create_index("ix_model_versions_model_id_status", "model_versions", ["model_id", "status"])


def downgrade() -> None:
    op.drop_table("model_versions")
    op.drop_table("models")
