"""Learner kinds are registered in code (app/training/kinds), as judgement formats are
since 0032: the CHECK constraint on `models.kind` goes and the column widens to
VARCHAR(32), so that a new kind (the choice model, issue 57) is its module. Nothing is
copied: PostgreSQL drops the constraint in place; SQLite, which cannot, has the table's
stored definition edited as its documentation describes for removing a CHECK constraint
(copying `models` would delete every version through ON DELETE CASCADE).

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-06
"""

from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0045"
down_revision: str | None = "0044"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONSTRAINT = "ck_models_model_kind"
OLD_KINDS = ("tripletboost", "tete", "comprf", "smerf", "disdf")
OLD_LENGTH, NEW_LENGTH = 12, 32
CHECK = f"CONSTRAINT {CONSTRAINT} CHECK (kind IN ({', '.join(repr(k) for k in OLD_KINDS)}))"


def _edit_sqlite_definition(edit: Callable[[str], str]) -> None:
    """Rewrite `models`' stored CREATE TABLE text with `edit`, then bump the schema
    version so every connection reads it."""
    bind = op.get_bind()
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    sql = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'models'"
    ).scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    bind.execute(
        sa.text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = 'models'"),
        {"sql": edit(sql)},
    )
    bind.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")
    problems = bind.exec_driver_sql("PRAGMA integrity_check").scalars().all()
    if problems != ["ok"]:
        raise RuntimeError(f"the edited schema fails SQLite's integrity check: {problems}")


def _replaced(sql: str, old: str, new: str) -> str:
    if sql.count(old) != 1:
        raise RuntimeError(f"models' definition does not hold {old!r} once: {sql}")
    return sql.replace(old, new)


def _unchecked(sql: str) -> str:
    # The check closes the table's list of columns and constraints.
    sql = _replaced(sql, f"kind VARCHAR({OLD_LENGTH})", f"kind VARCHAR({NEW_LENGTH})")
    return _replaced(sql, f", \n\t{CHECK}", "")


def _checked(sql: str) -> str:
    sql = _replaced(sql, f"kind VARCHAR({NEW_LENGTH})", f"kind VARCHAR({OLD_LENGTH})")
    return sql.rstrip().removesuffix(")").rstrip() + f", \n\t{CHECK}\n)"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE models DROP CONSTRAINT {CONSTRAINT}")
        op.execute(f"ALTER TABLE models ALTER COLUMN kind TYPE VARCHAR({NEW_LENGTH})")
        return
    _edit_sqlite_definition(_unchecked)


def downgrade() -> None:
    listed = ", ".join(f"'{kind}'" for kind in OLD_KINDS)
    found = op.get_bind().exec_driver_sql(
        f"SELECT count(*) FROM models WHERE kind NOT IN ({listed})"
    )
    if found.scalar_one():
        raise RuntimeError(
            "models holds kinds the old schema does not know (choice models): delete those "
            "models before going back"
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE models ALTER COLUMN kind TYPE VARCHAR({OLD_LENGTH})")
        op.execute(f"ALTER TABLE models ADD {CHECK}")
        return
    _edit_sqlite_definition(_checked)
