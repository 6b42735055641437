"""Run Alembic from code: `closer migrate`, `closer serve` on the embedded default, tests."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str) -> Config:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


def pending_revisions(engine: Engine, database_url: str) -> list[str]:
    """Revisions between the database's current one and head, oldest first."""
    script = ScriptDirectory.from_config(alembic_config(database_url))
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_heads()
    pending = [
        rev.revision for rev in script.iterate_revisions("heads", current[0] if current else "base")
    ]
    return list(reversed(pending))
