"""Repeated screens and the noise ceiling (issue 57): `judgements.screen` names the screen
a judgement answered (a hash of its format, context and items as a set, computed in
Python by app/formats), indexed with the project, so the screens several people answered
are found from the index; existing judgements get theirs here, in batches.
`projects.repeat_share` is the share of a screen study's random screens drawn from its
pool of repeated ones: 0 for the studies that exist (what their raters are asked does
not change under them), the settings' default for new ones.

Revision ID: 0046
Revises: 0045
Create Date: 2026-12-06
"""

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0046"
down_revision: str | None = "0045"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 20_000
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _screen_number(format_name: str, context, shown) -> int:
    """app/formats/base.py's screen_number as of this revision, frozen."""
    named = f"{format_name}|{','.join(map(str, context))}|{','.join(map(str, sorted(shown)))}"
    return int.from_bytes(hashlib.blake2b(named.encode(), digest_size=8).digest(), "big") >> 1


def upgrade() -> None:
    op.add_column("judgements", sa.Column("screen", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_judgements_project_id_screen", "judgements", ["project_id", "screen", "rater_id"]
    )
    op.add_column(
        "projects",
        sa.Column("repeat_share", sa.Float(), nullable=False, server_default=sa.text("0")),
    )
    judgements = sa.table(
        "judgements",
        sa.column("id", sa.Integer),
        sa.column("format", sa.String),
        sa.column("context", JSON_VALUE),
        sa.column("shown", JSON_VALUE),
        sa.column("screen", sa.BigInteger),
    )
    bind = op.get_bind()
    after = 0
    while rows := bind.execute(
        sa.select(judgements.c.id, judgements.c.format, judgements.c.context, judgements.c.shown)
        .where(judgements.c.id > after)
        .order_by(judgements.c.id)
        .limit(BATCH)
    ).all():
        after = rows[-1].id
        bind.execute(
            judgements.update()
            .where(judgements.c.id == sa.bindparam("row_id"))
            .values(screen=sa.bindparam("number")),
            [
                {"row_id": row.id, "number": _screen_number(row.format, row.context, row.shown)}
                for row in rows
            ],
        )


def downgrade() -> None:
    # ALTER TABLE … DROP COLUMN in place on both databases (SQLite 3.35 and later): a copy
    # of `projects` would delete every child row through ON DELETE CASCADE.
    op.drop_column("projects", "repeat_share")
    op.drop_index("ix_judgements_project_id_screen", table_name="judgements")
    op.drop_column("judgements", "screen")
