"""Judgement formats are registered in code (app/formats), not listed in the schema: the
CHECK constraints on `projects.judgement`, `assignments.format` and `judgements.format`
go, and the columns widen to VARCHAR(32), so that a new format is its module and its
template. closer_answer() says so in its comments (frozen in sql/closer_answer_0032.sql).
Nothing is copied: PostgreSQL drops the constraints in place; SQLite, which
cannot, has the tables' stored definitions edited as its documentation describes for
removing a CHECK constraint (the rows are stored the same either way), since copying
`projects` would delete every child row through ON DELETE CASCADE.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column, constraint, the values its CHECK allowed)
CHECKED = (
    ("projects", "judgement", "ck_projects_judgement", ("triplet", "odd_one_out", "rank")),
    (
        "assignments",
        "format",
        "ck_assignments_judgement_format",
        ("triplet", "odd_one_out", "rank", "sort"),
    ),
    (
        "judgements",
        "format",
        "ck_judgements_judgement_format",
        ("triplet", "odd_one_out", "rank", "sort"),
    ),
)
OLD_LENGTH, NEW_LENGTH = 11, 32


def _answer_function(revision: str) -> str:
    """closer_answer() as `revision` installed it, frozen."""
    return (Path(__file__).parent / "sql" / f"closer_answer_{revision}.sql").read_text()


def _check(constraint: str, column: str, values: tuple[str, ...]) -> str:
    listed = ", ".join(f"'{value}'" for value in values)
    return f"CONSTRAINT {constraint} CHECK ({column} IN ({listed}))"


def _edit_sqlite_definitions(edit) -> None:
    """Rewrite each table's stored CREATE TABLE text with `edit(sql, table, column,
    constraint, values)`, then bump the schema version so every connection reads it."""
    bind = op.get_bind()
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    for table, column, constraint, values in CHECKED:
        sql = bind.execute(
            sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :table"),
            {"table": table},
        ).scalar_one()
        changed = edit(sql, table, column, constraint, values)
        bind.execute(
            sa.text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = :table"),
            {"sql": changed, "table": table},
        )
    bind.exec_driver_sql(f"PRAGMA schema_version = {version + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema = OFF")
    problems = bind.exec_driver_sql("PRAGMA integrity_check").scalars().all()
    if problems != ["ok"]:
        raise RuntimeError(f"the edited schema fails SQLite's integrity check: {problems}")


def _replaced(sql: str, old: str, new: str, table: str) -> str:
    if sql.count(old) != 1:
        raise RuntimeError(f"{table}'s definition does not hold {old!r} once: {sql}")
    return sql.replace(old, new)


def _dropped(sql: str, table: str, column: str, constraint: str, values) -> str:
    check = _check(constraint, column, values)
    typed = f"{column} VARCHAR({OLD_LENGTH})"
    sql = _replaced(sql, typed, f"{column} VARCHAR({NEW_LENGTH})", table)
    # The CHECK follows the column (added by ALTER TABLE) or closes the table's list.
    separated = f", \n\t{check}"
    if separated in sql:
        return _replaced(sql, separated, "", table)
    return _replaced(sql, f" {check}", "", table)


def _restored(sql: str, table: str, column: str, constraint: str, values) -> str:
    check = _check(constraint, column, values)
    typed = f"{column} VARCHAR({NEW_LENGTH})"
    sql = _replaced(sql, typed, f"{column} VARCHAR({OLD_LENGTH})", table)
    if table == "judgements":  # created with its constraints listed last
        return sql.rstrip().removesuffix(")").rstrip() + f", \n\t{check}\n)"
    start = sql.index(f"{column} VARCHAR({OLD_LENGTH})")
    end = sql.index("NOT NULL", start) + len("NOT NULL")
    return sql[:end] + f" {check}" + sql[end:]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, column, constraint, _ in CHECKED:
            op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")
            op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE VARCHAR({NEW_LENGTH})")
        op.execute(_answer_function("0032"))
        return
    _edit_sqlite_definitions(_dropped)


def downgrade() -> None:
    # The old schema lists four formats: a row of any other cannot go back.
    for table, column, _, values in CHECKED:
        listed = ", ".join(f"'{value}'" for value in values)
        found = op.get_bind().exec_driver_sql(
            f"SELECT count(*) FROM {table} WHERE {column} NOT IN ({listed})"
        )
        if found.scalar_one():
            raise RuntimeError(
                f"{table}.{column} holds formats the old schema does not know: delete "
                "those rows (or their project) before going back"
            )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_answer_function("0027"))
        for table, column, constraint, values in CHECKED:
            op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE VARCHAR({OLD_LENGTH})")
            op.execute(f"ALTER TABLE {table} ADD {_check(constraint, column, values)}")
        return
    _edit_sqlite_definitions(_restored)
