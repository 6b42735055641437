"""Waking idle workers when a job is queued, instead of letting it wait for their next
look at the queue (a researcher who asks for a fit should see it start at once).

In one process (the embedded default: worker threads beside the web server) the commit
that queues a job rings a bell the workers wait on. Across processes on PostgreSQL the
same commit sends `NOTIFY closer_jobs`, and each worker process listens on a connection of
its own and rings its bell. Either way a worker still looks at the queue every
`poll_seconds`, so a lost signal costs that long and nothing more.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from app.core.db import libpq_conninfo

log = logging.getLogger("closer.worker")
CHANNEL = "closer_jobs"


class Bell:
    """A counter that waiters watch: ringing wakes every waiter, and one that looked at
    the queue before a ring does not sleep through it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._rings = 0

    def ring(self) -> None:
        with self._changed:
            self._rings += 1
            self._changed.notify_all()

    def rings(self) -> int:
        return self._rings

    def wait(self, since: int, timeout: float) -> bool:
        """Wait until rung after `since` (True) or `timeout` seconds pass (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._rings != since, timeout)


BELL = Bell()


def announce_job(session: Session) -> None:
    """Call where a job is queued: once the session commits, idle workers wake."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"NOTIFY {CHANNEL}"))  # delivered at commit, dropped on rollback
    if not event.contains(session, "after_commit", _ring_after_commit):
        event.listen(session, "after_commit", _ring_after_commit, once=True)


def _ring_after_commit(session: Session) -> None:
    BELL.ring()


class Listener:
    """A thread holding `LISTEN closer_jobs` on a connection of its own (PostgreSQL), which
    rings the bell at each notification; it reconnects after an outage."""

    def __init__(self, engine: Engine, bell: Bell = BELL) -> None:
        self.url = libpq_conninfo(engine.url)
        self.bell = bell
        self.stopping = threading.Event()
        # Set once LISTEN holds: from then on no notification is missed.
        self.listening = threading.Event()
        self.thread = threading.Thread(target=self._run, name="closer-listen", daemon=True)

    def start(self) -> Listener:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()

    def _run(self) -> None:
        import psycopg

        while not self.stopping.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    while not self.stopping.is_set():
                        for _ in connection.notifies(timeout=1.0, stop_after=1):
                            self.bell.ring()
            except psycopg.Error as exc:
                log.warning("listening for new jobs failed, polling meanwhile: %s", exc)
                self.stopping.wait(2.0)
