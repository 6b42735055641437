"""Initial schema: researchers and tokens, projects, items, triplets, uploads, raters, jobs.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
NOT_NULL_KEY = sa.text("idempotency_key IS NOT NULL")


def string_enum(name: str, *values: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, create_constraint=True)


def upgrade() -> None:
    op.create_table(
        "researchers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_researchers")),
        sa.UniqueConstraint("name", name=op.f("uq_researchers_name")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("researcher_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["researcher_id"],
            ["researchers.id"],
            name=op.f("fk_api_tokens_researcher_id_researchers"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_index(op.f("ix_api_tokens_researcher_id"), "api_tokens", ["researcher_id"])

    op.create_table(
        "projects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("label_type", string_enum("label_type", "class", "number"), nullable=False),
        sa.Column("feature_dim", sa.Integer(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["researchers.id"], name=op.f("fk_projects_owner_id_researchers")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
    )
    op.create_index(op.f("ix_projects_owner_id"), "projects", ["owner_id"])

    op.create_table(
        "items",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("image_file", sa.String(80), nullable=True),
        sa.Column("image_type", sa.String(40), nullable=True),
        sa.Column("features", sa.LargeBinary(), nullable=True),
        sa.Column(
            "split", string_enum("item_split", "train", "test", "unlabelled"), nullable=False
        ),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_items_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_items")),
        sa.UniqueConstraint("project_id", "key", name="uq_items_project_id_key"),
    )

    # No foreign keys on purpose: see app/models/triplet.py.
    op.create_table(
        "triplets",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("anchor_id", BIG_ID, nullable=False),
        sa.Column("closer_id", BIG_ID, nullable=False),
        sa.Column("farther_id", BIG_ID, nullable=False),
        sa.Column(
            "source", string_enum("triplet_source", "upload", "rater", "oracle"), nullable=False
        ),
        sa.Column("rater_id", sa.Integer(), nullable=True),
        sa.Column("query_id", BIG_ID, nullable=True),
        sa.Column("upload_id", sa.Integer(), nullable=True),
        sa.Column("idempotency_key", sa.String(100), nullable=True),
        sa.Column("response_time_ms", sa.Integer(), nullable=True),
        sa.Column(
            "created_at", TIMESTAMP, server_default=sa.func.current_timestamp(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_triplets")),
    )
    op.create_index("ix_triplets_project_id_id", "triplets", ["project_id", "id"])
    op.create_index(
        "uq_triplets_project_id_idempotency_key",
        "triplets",
        ["project_id", "idempotency_key"],
        unique=True,
        postgresql_where=NOT_NULL_KEY,
        sqlite_where=NOT_NULL_KEY,
    )

    op.create_table(
        "uploads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("kind", string_enum("upload_kind", "items", "triplets"), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("idempotency_key", sa.String(100), nullable=True),
        sa.Column("row_count", sa.Integer(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_uploads_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_uploads")),
    )
    op.create_index(op.f("ix_uploads_project_id"), "uploads", ["project_id"])
    op.create_index(
        "uq_uploads_project_id_idempotency_key",
        "uploads",
        ["project_id", "idempotency_key"],
        unique=True,
        postgresql_where=NOT_NULL_KEY,
        sqlite_where=NOT_NULL_KEY,
    )

    op.create_table(
        "raters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("external_id", sa.String(200), nullable=False),
        sa.Column("platform", sa.String(32), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_raters_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_raters")),
        sa.UniqueConstraint("project_id", "external_id", name="uq_raters_project_id_external_id"),
    )

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(50), nullable=False),
        sa.Column(
            "status",
            string_enum("job_status", "queued", "running", "succeeded", "failed", "cancelled"),
            nullable=False,
        ),
        sa.Column("progress", sa.Double(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("params", JSON_VALUE, nullable=False),
        sa.Column("result", JSON_VALUE, nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("locked_by", sa.String(100), nullable=True),
        sa.Column("heartbeat_at", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_jobs_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_project_id"), "jobs", ["project_id"])
    op.create_index("ix_jobs_status_created_at", "jobs", ["status", "created_at"])


def downgrade() -> None:
    for table in (
        "jobs",
        "raters",
        "uploads",
        "triplets",
        "items",
        "projects",
        "api_tokens",
        "researchers",
    ):
        op.drop_table(table)
