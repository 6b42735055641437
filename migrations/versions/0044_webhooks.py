"""A project's webhooks and their deliveries (webhooks, webhook_deliveries).

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0044"
down_revision: str | None = "0043"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    moment = sa.DateTime(timezone=True)
    json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "project_id",
            sa.Integer,
            sa.ForeignKey(
                "projects.id", ondelete="CASCADE", name="fk_webhooks_project_id_projects"
            ),
            nullable=False,
        ),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("secret", sa.String(200), nullable=False),
        sa.Column("events", json, nullable=False),
        sa.Column("created_at", moment, nullable=False),
        sa.Column(
            "created_by",
            sa.Integer,
            sa.ForeignKey(
                "researchers.id", ondelete="SET NULL", name="fk_webhooks_created_by_researchers"
            ),
        ),
        sa.PrimaryKeyConstraint("id", name="pk_webhooks"),
    )
    op.create_index("ix_webhooks_project_id", "webhooks", ["project_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "webhook_id",
            sa.Integer,
            sa.ForeignKey(
                "webhooks.id", ondelete="CASCADE", name="fk_webhook_deliveries_webhook_id_webhooks"
            ),
            nullable=False,
        ),
        sa.Column("event", sa.String(40), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("payload", json, nullable=False),
        sa.Column("created_at", moment, nullable=False),
        sa.Column("next_attempt_at", moment),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("delivered_at", moment),
        sa.Column("failed_at", moment),
        sa.Column("last_status", sa.Integer),
        sa.Column("last_error", sa.Text, nullable=False),
        sa.Column("last_duration_ms", sa.Integer),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.UniqueConstraint(
            "webhook_id", "event", "subject", name="uq_webhook_deliveries_webhook_id"
        ),
        sa.UniqueConstraint("message_id", name="uq_webhook_deliveries_message_id"),
    )
    op.create_index("ix_webhook_deliveries_webhook_id", "webhook_deliveries", ["webhook_id"])
    op.create_index(
        "ix_webhook_deliveries_next_attempt_at", "webhook_deliveries", ["next_attempt_at"]
    )


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
