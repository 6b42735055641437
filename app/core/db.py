"""Engine and session setup for SQLite (embedded default) and PostgreSQL."""

from __future__ import annotations

import os
from collections import namedtuple
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from sqlalchemy import (
    Connection,
    CursorResult,
    Engine,
    MetaData,
    Result,
    create_engine,
    event,
    func,
    select,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _sqlite_configurer(busy_seconds: float) -> Callable:
    def configure(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_seconds * 1000)}")
        cursor.close()

    return configure


def make_engine(
    url: str, pool_size: int = 20, max_overflow: int = 10, sqlite_busy_seconds: float = 30.0
) -> Engine:
    """An engine for `url`. On PostgreSQL the pool keeps `pool_size` connections open: a
    busy web process uses about as many as its thread pool runs requests, and every
    connection opened beyond the pool is closed again when returned, which under load
    turns into a stream of new server processes. On SQLite a writer waits up to
    `sqlite_busy_seconds` for another's write to end, then fails "database is locked"
    (which the API answers as 503 with Retry-After)."""
    if url.startswith("sqlite"):
        _keep_private(make_url(url).database)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_configurer(sqlite_busy_seconds))
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow)


def _keep_private(database: str | None) -> None:
    """The SQLite file, and its write-ahead log beside it, readable by this user alone:
    they hold password and token hashes (as the secret key file is kept, 0600)."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    if not os.path.exists(database):
        try:
            os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except (FileExistsError, FileNotFoundError):
            return  # created meanwhile, or its folder is missing (connecting says so)
    for path in (database, f"{database}-wal", f"{database}-shm"):
        try:
            if os.stat(path).st_mode & 0o077:
                os.chmod(path, 0o600)
        except FileNotFoundError:
            pass


def libpq_conninfo(url: str | URL) -> str:
    """What psycopg connects with, for connections of our own beside the engine's pool
    (the answer function's, a worker's LISTEN): the URL less SQLAlchemy's driver name."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def on_commit(session: Session, action: Callable[[], None]) -> None:
    """Run `action` once the unit of work commits (e.g. delete files of deleted rows)."""
    session.info.setdefault("on_commit", []).append(action)


def on_rollback(session: Session, action: Callable[[], None]) -> None:
    """Run `action` if the unit of work rolls back (e.g. remove files a failed upload wrote)."""
    session.info.setdefault("on_rollback", []).append(action)


def roll_back(session: Session) -> None:
    """Undo the unit of work so far and run its rollback hooks, for a route that reports
    a failure as a page (a status it returns) instead of raising it."""
    session.info.pop("on_commit", None)
    hooks = session.info.pop("on_rollback", [])
    session.rollback()
    for hook in hooks:
        hook()


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any error, then run the hooks."""
    session = factory()
    hooks: list[Callable[[], None]] = []
    try:
        yield session
        session.commit()
        hooks = session.info.pop("on_commit", [])
    except BaseException:
        hooks = session.info.pop("on_rollback", [])
        try:
            session.rollback()
        except DBAPIError:
            # The connection broke (the database restarted, say), and the rollback with
            # it: the server dropped the transaction already, and the error that broke
            # the connection is the one to report (a 503), not this one.
            pass
        raise
    finally:
        session.info.clear()
        session.close()
        for hook in hooks:
            hook()


class FastStatement:
    """A Core statement compiled once per dialect and run straight on the session
    connection's DBAPI cursor, inside its transaction.

    For the few statements a request runs hundreds of times a second (an answer is
    eight of them): SQLAlchemy's per-execution work cost more than the database's; and
    for reads of many rows, where its row objects cost more than the read itself.
    Bind values go through the columns' own processors (zoned timestamps, enums), so
    they are stored exactly as the ORM stores them; rows come back as named tuples of
    the driver's values.
    """

    def __init__(self, statement) -> None:
        self.statement = statement
        self._by_dialect: dict[str, tuple] = {}

    def _compiled(self, dialect) -> tuple:
        found = self._by_dialect.get(dialect.name)
        if found is None:
            compiled = self.statement.compile(dialect=dialect)
            processors = dict(compiled._bind_processors)
            order = compiled.positiontup if compiled.positional else None
            found = (compiled, str(compiled), processors, order, [None])
            self._by_dialect[dialect.name] = found
        return found

    def _arguments(self, compiled, processors, order, params: dict):
        values = compiled.construct_params(params)
        for name, process in processors.items():
            if name in values:
                values[name] = process(values[name])
        return tuple(values[name] for name in order) if order is not None else values

    def run_many(self, session: Session, rows: list[dict]) -> None:
        """Execute once per row of parameters, in one driver call (no rows returned)."""
        connection = session.connection()
        compiled, sql, processors, order, _ = self._compiled(connection.dialect)
        arguments = [self._arguments(compiled, processors, order, row) for row in rows]
        cursor = driver_connection(connection).cursor()
        try:
            cursor.executemany(sql, arguments)
        finally:
            cursor.close()

    def run_all(self, session: Session, params: dict) -> list[tuple]:
        """Execute; every row, as the driver's own tuples."""
        connection = session.connection()
        compiled, sql, processors, order, _ = self._compiled(connection.dialect)
        arguments = self._arguments(compiled, processors, order, params)
        cursor = driver_connection(connection).cursor()
        try:
            cursor.execute(sql, arguments)
            return cursor.fetchall()
        finally:
            cursor.close()

    def run(self, session: Session, params: dict):
        """Execute; returns the first row (or None) when the statement returns rows."""
        connection = session.connection()
        compiled, sql, processors, order, row_type = self._compiled(connection.dialect)
        arguments = self._arguments(compiled, processors, order, params)
        driver = driver_connection(connection)
        cursor = driver.cursor()
        try:
            cursor.execute(sql, arguments)
            if cursor.description is None:
                return None
            if row_type[0] is None:
                row_type[0] = namedtuple("Row", [column[0] for column in cursor.description])
            row = cursor.fetchone()
            return None if row is None else row_type[0](*row)
        finally:
            cursor.close()


def session_engine(session: Session) -> Engine:
    """The engine the session's connections come from."""
    bind = session.get_bind()
    return bind if isinstance(bind, Engine) else bind.engine


def driver_connection(connection: Connection) -> Any:
    """The driver's own connection under `connection` (psycopg's or sqlite3's): for COPY,
    executemany and server-side cursors, which SQLAlchemy does not wrap."""
    driver = connection.connection.driver_connection
    if driver is None:  # only once the pool has invalidated it
        raise RuntimeError("the database connection is closed")
    return driver


def rows_changed(result: Result[Any]) -> int:
    """How many rows an UPDATE or DELETE changed (its result is always a cursor's)."""
    return cast(CursorResult[Any], result).rowcount


def ordinal_in_project(session: Session, table: Any, project_id: int, row_id: int) -> int:
    """Which one of its project's rows `row_id` is (1 for the first, by id): what a page
    calls a project's build or upload, since ids are shared by every project."""
    return (
        session.scalar(
            select(func.count()).where(table.project_id == project_id, table.id <= row_id)
        )
        or 0
    )
