"""Alembic history: clean upgrade and downgrade on both databases, and no drift from the models."""

import itertools
import json

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from app.core import migrations
from app.core.db import make_engine
from app.models import Base

# The migrations on PostgreSQL run in the full suite (scripts/test --fast: SQLite only).
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)]


def _tables(engine) -> set[str]:
    engine.dispose()  # a fresh look at the schema, not a pooled connection's
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_revision_applies_and_reverses(backend, make_database_url):
    """Up the history a revision at a time, each one reversed and applied again on the
    way (the schema it reverses to is the one before it); at the top, the models'
    tables; reversed to the base, none."""
    url = make_database_url(backend, "migrations")
    engine = make_engine(url)
    try:
        previous, before = "base", set()
        for revision in migrations.pending_revisions(engine, url):
            migrations.upgrade(url, revision)
            after = _tables(engine)
            migrations.downgrade(url, previous)
            assert _tables(engine) == before, f"{revision} does not reverse to {previous}"
            migrations.upgrade(url, revision)
            assert _tables(engine) == after, f"{revision} applies differently the second time"
            previous, before = revision, after
        assert before == set(Base.metadata.tables)
        assert migrations.pending_revisions(engine, url) == []
        migrations.downgrade(url, "base")
        assert _tables(engine) == set()
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
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


@pytest.mark.slow  # (PostgreSQL's migrations: the full suite)
def test_postgresql_stores_a_builds_state_as_it_is(make_database_url):
    """The state is deflated already: the server's compression of it on every save (45 MB
    at 50,000 items) would only take CPU."""
    url = make_database_url("postgresql", "storage")
    migrations.upgrade(url)
    engine = make_engine(url)
    try:
        storage = _rows(
            engine,
            "SELECT attstorage FROM pg_attribute"
            " WHERE attrelid = 'builds'::regclass AND attname = 'state'",
        )
    finally:
        engine.dispose()
    assert storage == [("e",)]


def test_pending_revisions_lists_what_a_fresh_database_needs(tmp_path):
    """Every revision, oldest first: one line of history, each revising the one before."""
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    engine = make_engine(url)
    try:
        pending = migrations.pending_revisions(engine, url)
    finally:
        engine.dispose()
    script = ScriptDirectory.from_config(migrations.alembic_config(url))
    assert len(script.get_heads()) == 1
    assert pending[0] == "0001" and pending[-1] == script.get_current_head()
    for older, newer in itertools.pairwise(pending):
        assert script.get_revision(newer).down_revision == older
    assert sorted(pending) == sorted(revision.revision for revision in script.walk_revisions())


ROUTING_ROWS = """
INSERT INTO researchers (id, name, is_admin, created_at) VALUES (1, 'r', false, '2026-11-01');
INSERT INTO projects (id, owner_id, name, description, label_type, created_at, public_slug,
    completion_code) VALUES (1, 1, 'p', '', 'class', '2026-11-01', 'slug', 'code');
INSERT INTO builds (id, project_id, status, params, state, items, answers_cursor, version,
    progress, message, created_at, updated_at) VALUES (1, 1, 'complete', '{}', '', '', 0, 0,
    '{}', '', '2026-11-01', '2026-11-01');
INSERT INTO predictions (id, project_id, build_id, status, item_ids, answers, answers_cursor,
    progress, result, ask_raters, created_at, updated_at) VALUES (7, 1, 1, 'routing', '[3, 4]',
    '', 5, '{"items": 2}', NULL, true, '2026-11-01', '2026-11-01');
INSERT INTO query_slots (id, project_id, priority, build_id, prediction_id, query_key,
    anchor_id, lo_id, hi_id, state, created_at) VALUES
    (1, 1, 0, NULL, 7, 11, 3, 1, 2, 'open', '2026-11-01'),
    (2, 1, 1, 1, NULL, 12, 1, 2, 3, 'open', '2026-11-01');
INSERT INTO jobs (id, kind, status, progress, message, params, attempts, max_attempts,
    cancel_requested, created_at) VALUES
    (1, 'comprf_routing_step', 'queued', 0, '', '{"prediction_id": 7}', 0, 3, false,
    '2026-11-01');
"""


def _rows(engine, sql: str) -> list[tuple]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(sql))]


def _params(value) -> dict:
    return value if isinstance(value, dict) else json.loads(value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_routings_keep_their_rows_slots_and_queued_steps_across_the_rename(
    backend, make_database_url
):
    """0016 renames `predictions` to `routings`: a study mid-routing loses nothing, its
    slots still point at it (and go with it), its queued step still finds it; and back."""
    url = make_database_url(backend, "rename")
    migrations.upgrade(url, "0015")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for statement in ROUTING_ROWS.split(";")[:-1]:
                connection.execute(text(statement))

        migrations.upgrade(url)
        engine.dispose()
        assert _rows(engine, "SELECT id, status, answers_cursor, ask_raters FROM routings") == [
            (7, "routing", 5, True)
        ]
        assert _rows(engine, "SELECT id, routing_id, build_id FROM query_slots ORDER BY id") == [
            (1, 7, None),
            (2, None, 1),
        ]
        [(params,)] = _rows(engine, "SELECT params FROM jobs")
        assert _params(params) == {"routing_id": 7}
        names = inspect(engine)
        assert {fk["name"] for fk in names.get_foreign_keys("query_slots")} >= {
            "fk_query_slots_routing_id_routings"
        }
        assert {index["name"] for index in names.get_indexes("query_slots")} >= {
            "ix_query_slots_routing_open"
        }
        assert "predictions" not in names.get_table_names()

        migrations.downgrade(url, "0015")
        engine.dispose()
        assert _rows(engine, "SELECT id, prediction_id FROM query_slots ORDER BY id") == [
            (1, 7),
            (2, None),
        ]
        [(params,)] = _rows(engine, "SELECT params FROM jobs")
        assert _params(params) == {"prediction_id": 7}

        migrations.upgrade(url)
        engine.dispose()
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO routings (id, project_id, build_id, status, "
                    "item_ids, answers, answers_cursor, progress, ask_raters, created_at, "
                    "updated_at) VALUES (8, 1, 1, 'complete', '[]', '', 0, '{}', false, "
                    "'2026-11-02', '2026-11-02')"
                )
            )
            connection.execute(text("DELETE FROM routings WHERE id = 7"))
        assert _rows(engine, "SELECT id FROM query_slots") == [(2,)]
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_studies_that_exist_keep_their_link_open_and_new_ones_start_closed(
    backend, make_database_url
):
    """0017 adds the link's state: a running study's link stays open (raters mid-session
    lose nothing), a study created afterwards starts closed; the check holds; and back."""
    url = make_database_url(backend, "link")
    migrations.upgrade(url, "0016")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for statement in ROUTING_ROWS.split(";")[:2]:
                connection.execute(text(statement))
        migrations.upgrade(url)
        engine.dispose()
        [(state, opened)] = _rows(engine, "SELECT link_state, link_opened_at FROM projects")
        assert state == "open" and opened is not None
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO projects (id, owner_id, name, description, label_type, "
                    "created_at, public_slug, completion_code, link_state) VALUES "
                    "(2, 1, 'q', '', 'class', '2026-11-02', 'slug2', 'code', 'closed')"
                )
            )
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(text("UPDATE projects SET link_state = 'ajar' WHERE id = 2"))

        migrations.downgrade(url, "0016")
        engine.dispose()
        assert _rows(engine, "SELECT id FROM projects ORDER BY id") == [(1,), (2,)]
        assert "link_state" not in {c["name"] for c in inspect(engine).get_columns("projects")}
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_builds_that_exist_take_their_projects_exclusions_of_today(backend, make_database_url):
    """0018 records which raters a build left out: the builds that exist take the raters
    excluded now, so none of them reads as holding answers of raters excluded since."""
    url = make_database_url(backend, "exclusions")
    migrations.upgrade(url, "0017")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for statement in ROUTING_ROWS.split(";")[:3]:
                connection.execute(text(statement))
            for rater_id, excluded in ((5, True), (6, False), (7, True)):
                connection.execute(
                    text(
                        "INSERT INTO raters (id, project_id, external_id, created_at, "
                        "platform_ids, answers, attention_passed, attention_failed, "
                        "majority_compared, excluded, exclusion_reason) VALUES "
                        f"({rater_id}, 1, 'r{rater_id}', '2026-11-01', '{{}}', 0, 0, 0, 0, "
                        f"{'true' if excluded else 'false'}, '')"
                    )
                )
        migrations.upgrade(url)
        engine.dispose()
        [(recorded,)] = _rows(engine, "SELECT excluded_rater_ids FROM builds")
        assert (recorded if isinstance(recorded, list) else json.loads(recorded)) == [5, 7]
        migrations.downgrade(url, "0017")
        engine.dispose()
        assert "excluded_rater_ids" not in {
            c["name"] for c in inspect(engine).get_columns("builds")
        }
    finally:
        engine.dispose()


TOKEN_ROWS = """
INSERT INTO researchers (id, name, is_admin, created_at) VALUES (1, 'r', false, '2026-11-01');
INSERT INTO api_tokens (id, researcher_id, name, token_hash, prefix, created_at) VALUES
    (1, 1, 'script', 'hash1', 'closer_abcdef', '2026-11-01'),
    (2, 1, 'old', 'hash2', 'closer_ghijkl', '2026-11-01');
INSERT INTO web_sessions (id, key_hash, researcher_id, api_token_id, created_at, last_seen_at)
    VALUES (1, 'key1', 1, NULL, '2026-11-01', '2026-11-01'),
    (2, 'key2', 1, 2, '2026-11-01', '2026-11-01');
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_tokens_made_before_scopes_stay_whole_and_no_browser_is_signed_out(
    backend, make_database_url
):
    """0031 adds scopes: a token made before keeps its power (admin, every project, no
    expiry), the browsers signed in stay signed in (SQLite copies the tokens' table,
    whose old copy takes the sessions with it), a scope outside the four is refused;
    back down, a token scoped since is revoked rather than made the whole account."""
    url = make_database_url(backend, "scopes")
    migrations.upgrade(url, "0030")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for statement in TOKEN_ROWS.split(";")[:-1]:
                connection.execute(text(statement))

        migrations.upgrade(url)
        engine.dispose()
        assert _rows(
            engine,
            "SELECT id, scope, all_projects, expires_at, made_by_token_id FROM api_tokens "
            "ORDER BY id",
        ) == [(1, "admin", True, None, None), (2, "admin", True, None, None)]
        assert _rows(engine, "SELECT id, api_token_id FROM web_sessions ORDER BY id") == [
            (1, None),
            (2, 2),
        ]
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(text("UPDATE api_tokens SET scope = 'root' WHERE id = 1"))
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE api_tokens SET scope = 'predict', made_by_token_id = 2 WHERE id = 1")
            )

        migrations.downgrade(url, "0030")
        engine.dispose()
        revoked = _rows(engine, "SELECT id, revoked_at IS NOT NULL FROM api_tokens ORDER BY id")
        assert revoked == [(1, True), (2, False)]
        assert _rows(engine, "SELECT id FROM web_sessions ORDER BY id") == [(1,), (2,)]
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_judgements_that_exist_get_their_screen_and_studies_keep_asking_as_they_did(
    backend, make_database_url
):
    """0046 names the screen of every judgement already stored (the same number a new
    one gets), and the studies that exist repeat no screens unless told to."""
    from app.formats import named

    url = make_database_url(backend, "screens")
    migrations.upgrade(url, "0045")
    engine = make_engine(url)
    shown = ([3, 1, 2], [2, 3, 1], [4, 5, 6])
    try:
        with engine.begin() as connection:
            for statement in ROUTING_ROWS.split(";")[:2]:
                connection.execute(text(statement))
            for number, items in enumerate(shown, start=1):
                connection.execute(
                    text(
                        "INSERT INTO judgements (id, project_id, format, context, shown, chosen, "
                        f"created_at) VALUES ({number}, 1, 'odd_one_out', '[]', "
                        f"'{json.dumps(items)}', '[{items[0]}]', '2026-11-01')"
                    )
                )
        migrations.upgrade(url)
        engine.dispose()
        screens = [row[0] for row in _rows(engine, "SELECT screen FROM judgements ORDER BY id")]
        odd_one_out = named("odd_one_out")
        assert screens == [odd_one_out.screen_of([], items) for items in shown]
        assert screens[0] == screens[1] != screens[2]  # one screen, shown in two orders
        assert _rows(engine, "SELECT repeat_share FROM projects") == [(0,)]
    finally:
        engine.dispose()
