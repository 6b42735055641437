"""Claims on long work that the database alone cannot tell is alive: held by a live
process, let go the moment it dies.

A project import commits in chunks for minutes. Whether its writer still runs or died
with its process is what the clean-up must know, and no timeout tells it exactly: a
claim does. On PostgreSQL it is a session-level advisory lock on a connection of its
own (the server drops it with the connection); on SQLite, where every process works on
one file, an exclusive `flock` on a file beside the database (the kernel drops it with
the process). Anything that acts on a claim's work re-reads its state once it holds
the claim: a claim tells who may act, the database what there is to do.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from sqlalchemy import Connection, Engine, text

_IN_MEMORY: set[tuple[int, int]] = set()  # claims of a database without a file
_IN_MEMORY_LOCK = threading.Lock()


class Claim:
    """A held claim; `release()` lets it go (a dead process lets go by itself)."""

    def __init__(
        self, key: tuple[int, int], connection: Connection | None = None, fd: int | None = None
    ) -> None:
        self.key = key
        self._connection = connection
        self._fd = fd

    def release(self) -> None:
        if self._connection is not None:
            try:
                self._connection.execute(
                    text("SELECT pg_advisory_unlock(:space, :key)"),
                    dict(zip(("space", "key"), self.key, strict=True)),
                )
            finally:
                self._connection.close()
                self._connection = None
        elif self._fd is not None:
            os.close(self._fd)  # closing the file lets its lock go
            self._fd = None
        else:
            with _IN_MEMORY_LOCK:
                _IN_MEMORY.discard(self.key)

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *_exc) -> None:
        self.release()


def _lock_file(engine: Engine, space: int, key: int) -> Path | None:
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    folder = Path(database).with_name(Path(database).name + ".claims")
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / f"{space}-{key}.lock"


def try_claim(engine: Engine, space: int, key: int) -> Claim | None:
    """The claim `(space, key)`, or None while a live process holds it."""
    if engine.dialect.name == "postgresql":
        connection = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            taken = connection.scalar(
                text("SELECT pg_try_advisory_lock(:space, :key)"), {"space": space, "key": key}
            )
        except BaseException:
            connection.close()
            raise
        if not taken:
            connection.close()
            return None
        return Claim((space, key), connection=connection)
    path = _lock_file(engine, space, key)
    if path is None:
        with _IN_MEMORY_LOCK:
            if (space, key) in _IN_MEMORY:
                return None
            _IN_MEMORY.add((space, key))
        return Claim((space, key))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return Claim((space, key), fd=fd)
