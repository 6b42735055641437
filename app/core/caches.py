"""What a process keeps between requests and jobs (a study's settings and item ids, the
cards raters see, warm CompRF builds, finished forests, fitted models, when a step was
last asked for), held by the app that serves them rather than by the module.

Each app (`create_app`) owns one `Caches`; its requests and its in-process workers see
it as `current()` (a context variable set per request and per worker thread), so two
apps in one process share nothing. Outside any app (`closer worker`, scripts, a test
calling a service directly) the process has one of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

Made = TypeVar("Made")


class Caches:
    """Named caches, each made on first use."""

    def __init__(self) -> None:
        self._made: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, name: str, make: Callable[[], Made]) -> Made:
        found = self._made.get(name)
        if found is None:
            with self._lock:
                found = self._made.get(name)
                if found is None:
                    found = self._made[name] = make()
        return found

    def drop(self, name: str) -> None:
        """Forget a cache (as a process that restarts would)."""
        with self._lock:
            self._made.pop(name, None)


_PROCESS = Caches()
_current: ContextVar[Caches] = ContextVar("closer_caches", default=_PROCESS)


def current() -> Caches:
    return _current.get()


@contextmanager
def using(caches: Caches) -> Iterator[Caches]:
    """Run the block with `caches` as the current ones."""
    token = _current.set(caches)
    try:
        yield caches
    finally:
        _current.reset(token)


class UseCaches:
    """ASGI middleware: every request of the app sees the app's caches."""

    def __init__(self, app, caches: Caches) -> None:
        self.app = app
        self.caches = caches

    async def __call__(self, scope, receive, send) -> None:
        token = _current.set(self.caches)
        try:
            await self.app(scope, receive, send)
        finally:
            _current.reset(token)
