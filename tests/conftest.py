"""Every database test runs twice: on SQLite and on a real PostgreSQL server.

The PostgreSQL server is started by the tests themselves (see tests/support/postgres.py)
unless CLOSER_TEST_POSTGRES_URL points at one. Set CLOSER_TEST_SKIP_POSTGRES=1 to run
SQLite only; otherwise a missing server is an error, not a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.auth.service import create_token
from app.core import caches, migrations
from app.core.config import Settings
from app.core.db import make_engine, unit_of_work
from app.main import create_app
from app.models import Base
from tests.support.postgres import PostgresServer, start_postgres

# Every database test runs on both; CLOSER_TEST_BACKENDS=sqlite (scripts/test --fast)
# runs them on SQLite alone (the answer-path tests still start PostgreSQL).
BACKENDS = os.environ.get("CLOSER_TEST_BACKENDS", "sqlite,postgresql").split(",")


def pytest_collection_modifyitems(config, items) -> None:
    """A test that drives Chromium is a `browser` test, whatever its module. A
    `one_database` test (a page's layout, scripts, security policy: nothing the database
    changes) runs on SQLite only, and the slow tests start first, then the browser ones,
    so that the short ones fill the workers' time around them rather than wait at the
    end."""
    once = []
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.get_closest_marker("one_database") and params.get("migrated_url") not in (
            None,
            "sqlite",
        ):
            once.append(item)
    if once:
        config.hook.pytest_deselected(items=once)
        items[:] = [item for item in items if item not in once]
    items.sort(
        key=lambda item: (
            item.get_closest_marker("slow") is None,
            item.get_closest_marker("browser") is None,
        )
    )
    items[:] = _dealt(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


@pytest.fixture(autouse=True)
def _no_interpreter_outside_the_slow_tests(request, monkeypatch):
    """The fast tier runs in one process a test: a test that starts Python (the service,
    the CLI, a fresh interpreter) is marked `slow` (or drives Chromium, `browser`), which
    this holds it to."""
    if request.node.get_closest_marker("slow") or request.node.get_closest_marker("browser"):
        return
    start = subprocess.Popen.__init__

    def refuse_python(self, args, *rest, **options):
        program = str(args[0] if isinstance(args, list | tuple) else args).split()[0]
        if program == sys.executable or Path(program).name.startswith(("python", "closer")):
            raise AssertionError(f"{request.node.nodeid} starts {Path(program).name}: mark it slow")
        start(self, args, *rest, **options)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_python)


def _dealt(items: list, workers: int) -> list:
    """The tests dealt round-robin into one run of tests per worker, laid end to end.
    pytest-xdist's work stealing gives each worker one contiguous run of the collection
    and steals from a run's end: without dealing, the first worker got every slow test and
    ran them one after the other while the others finished the short ones and waited."""
    if workers < 2:
        return items
    return [item for hand in range(workers) for item in items[hand::workers]]


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | None]:
    if os.environ.get("CLOSER_TEST_POSTGRES_URL") or os.environ.get("CLOSER_TEST_SKIP_POSTGRES"):
        yield None
        return
    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def make_database_url(postgres_server, tmp_path_factory):
    """A fresh, empty database of the given backend, named for the caller."""

    def make(backend: str, name: str) -> str:
        if backend == "sqlite":
            return f"sqlite:///{tmp_path_factory.mktemp(name) / 'closer.db'}"
        if os.environ.get("CLOSER_TEST_SKIP_POSTGRES"):
            pytest.skip("CLOSER_TEST_SKIP_POSTGRES is set")
        database = f"closer_{name}_{_worker()}"
        external = os.environ.get("CLOSER_TEST_POSTGRES_URL")
        if external:
            import psycopg
            from sqlalchemy.engine import make_url

            url = make_url(external)
            plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
            with psycopg.connect(plain, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}"')
                conn.execute(f'CREATE DATABASE "{database}"')
            return url.set(database=database).render_as_string(hide_password=False)
        return postgres_server.create_database(database)

    return make


@pytest.fixture(scope="session")
def migrated_urls() -> dict[str, str]:
    return {}


@pytest.fixture(scope="session", params=BACKENDS)
def migrated_url(request, make_database_url, migrated_urls) -> str:
    """One database per backend, migrated to head once through Alembic. Pytest sets up a
    parametrised session fixture again whenever the order of tests switches backends (as
    a test worker's may); the database made the first time stays, since the engines in
    `backend_engines` still hold connections to it."""
    if request.param not in migrated_urls:
        url = make_database_url(request.param, "tests")
        migrations.upgrade(url)
        migrated_urls[request.param] = url
    return migrated_urls[request.param]


@pytest.fixture(scope="session")
def backend_engines():
    engines = {}
    yield engines
    for engine in engines.values():
        engine.dispose()


@pytest.fixture
def database_url(migrated_url, backend_engines) -> Iterator[str]:
    yield migrated_url
    engine = backend_engines.setdefault(migrated_url, make_engine(migrated_url))
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    with engine.begin() as connection:
        # DELETE, not TRUNCATE: a test leaves a few rows, and PostgreSQL's TRUNCATE of
        # every table (new files for each) took 50-80 ms a test, DELETE about 2 ms.
        for table in tables:
            connection.execute(text(f"DELETE FROM {table}"))
        if engine.dialect.name == "postgresql":
            # Ids start at 1 again, as in a fresh database.
            sequences = connection.execute(
                text("SELECT sequencename FROM pg_sequences WHERE schemaname = current_schema()")
            ).scalars()
            resets = ", ".join(f"setval('{name}', 1, false)" for name in sequences)
            if resets:
                connection.execute(text(f"SELECT {resets}"))


@pytest.fixture
def settings(database_url, tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        worker_in_process=False,
        max_upload_bytes=5 * 1024 * 1024,
        max_zip_uncompressed_bytes=50 * 1024 * 1024,
        rate_limits=False,  # tests answer faster than people; tests/test_rate_limits.py has them on
    )


@pytest.fixture
def app(settings):
    """The app; what the test itself calls (a worker's jobs, a service) shares its caches,
    as the embedded worker does."""
    application = create_app(settings)
    with caches.using(application.state.caches):
        yield application
    application.state.engine.dispose()


@pytest.fixture
def client(app) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def new_token(app):
    def make(name: str = "alice", admin: bool = False) -> dict[str, str]:
        with unit_of_work(app.state.session_factory) as session:
            token = create_token(session=session, researcher_name=name, admin=admin)
        return {"Authorization": f"Bearer {token}"}

    return make


@pytest.fixture
def auth(new_token) -> dict[str, str]:
    return new_token("alice")


@pytest.fixture
def project(client, auth) -> dict:
    response = client.post("/api/v1/projects", json={"name": "shapes"}, headers=auth)
    assert response.status_code == 201, response.text
    return response.json()
