"""Alembic history: clean upgrade and downgrade on both databases, and no drift from the models."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from app.core import migrations
from app.core.db import make_engine
from app.models import Base

TABLES = {
    "researchers",
    "api_tokens",
    "projects",
    "items",
    "triplets",
    "uploads",
    "raters",
    "rater_sessions",
    "jobs",
    "builds",
    "query_slots",
    "assignments",
    "predictions",
}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_upgrade_downgrade_upgrade(backend, make_database_url):
    url = make_database_url(backend, "migrations")
    engine = make_engine(url)
    try:
        migrations.upgrade(url)
        assert TABLES <= set(inspect(engine).get_table_names())
        assert migrations.pending_revisions(engine, url) == []

        migrations.downgrade(url, "base")
        engine.dispose()
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}

        migrations.upgrade(url)
        engine.dispose()
        assert TABLES <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_models_match_the_migrated_schema(backend, make_database_url):
    url = make_database_url(backend, "drift")
    migrations.upgrade(url)
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_pending_revisions_lists_what_a_fresh_database_needs(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    engine = make_engine(url)
    try:
        assert migrations.pending_revisions(engine, url) == [
            "0001",
            "0002",
            "0003",
            "0004",
            "0005",
            "0006",
            "0007",
            "0008",
            "0009",
            "0010",
            "0011",
            "0012",
            "0013",
            "0014",
            "0015",
        ]
    finally:
        engine.dispose()
