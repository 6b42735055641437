"""Engine and session setup for SQLite (embedded default) and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, MetaData, create_engine, event
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


def _configure_sqlite(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _configure_sqlite)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def on_commit(session: Session, action: Callable[[], None]) -> None:
    """Run `action` once the unit of work commits (e.g. delete files of deleted rows)."""
    session.info.setdefault("on_commit", []).append(action)


def on_rollback(session: Session, action: Callable[[], None]) -> None:
    """Run `action` if the unit of work rolls back (e.g. remove files a failed upload wrote)."""
    session.info.setdefault("on_rollback", []).append(action)


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any error, then run the hooks."""
    session = factory()
    try:
        yield session
        session.commit()
        hooks = session.info.pop("on_commit", [])
    except BaseException:
        session.rollback()
        hooks = session.info.pop("on_rollback", [])
        raise
    finally:
        session.info.clear()
        session.close()
        for hook in hooks:
            hook()
