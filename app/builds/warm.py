"""CompRF builds held in a process between steps, and the queue updates a step makes.

A step's fixed costs at 50,000 items (a million root queries, 5 M answers held) were
what a busy crowd's answers paid for: a reload and save of the whole state, a sort of
the whole pending list, a comparison with the whole queue. Here a warm build keeps what
the last step knew, so the next step's cost follows the answers it reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy.orm import Session

from app.core import caches
from app.learn.keys import query_keys, unpack_query_keys
from app.models import Build, BuildStatus
from app.scheduling import queue

if TYPE_CHECKING:
    from app.learn import CompRFBuilder


FRESH_PROGRESS_QUERIES = 100_000
# A large build's steps wait at most this long after the last one ended: the sweep's
# period, so no answer waits longer for the build however long one step took.
MOST_STEP_WAIT = 2.0


def item_ids(build: Build) -> np.ndarray:
    """The build's item ids by position. A build's items never change, so a process
    reads them once (a step read 400 kB of them twice at 50,000 items)."""
    held = caches.current().get("builds.item_ids", lambda: PerBuild(_read_item_ids, 16))
    return held.get(build)


def _read_item_ids(build: Build) -> np.ndarray:
    return np.frombuffer(build.items, dtype=np.int64)


class PerBuild:
    """What a process makes from a build and keeps, as it never changes (its item ids, a
    finished forest): by `cache_key`, for at most `most` builds, the oldest dropped."""

    def __init__(self, make: Callable[[Build], Any], most: int) -> None:
        self.make = make
        self.most = most
        self._made: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def get(self, build: Build) -> Any:
        key = cache_key(build)
        with self._lock:
            found = self._made.get(key)
        if found is None:
            found = self.make(build)
            with self._lock:
                self._made[key] = found
                while len(self._made) > self.most:
                    self._made.pop(next(iter(self._made)))
        return found


@dataclass
class Warm:
    """A build held in this process between steps: the builder with every answer up to
    `cursor` folded in, the version and cursor it was last saved at (together they fix
    the saved state), the queue it asked for last, and what its upkeep last cost."""

    saved_version: int
    saved_cursor: int
    saved_at: float
    cursor: int
    builder: CompRFBuilder
    wanted: tuple[np.ndarray, np.ndarray]  # query keys (sorted) and answers needed
    full_sync_at: float  # when the whole queue was last compared with the build
    progress: dict
    progress_at: float
    costs: dict[str, float]  # seconds the last step, save, full sync and progress took
    stepped_at: float = 0.0  # when the last step ended


def cache_key(build: Build) -> tuple:
    """What a process keeps a build's forest or warm state by: its id and creation time
    together, since SQLite gives a new row the id of the newest deleted one."""
    return build.id, build.created_at


class WarmBuilds:
    """Builds kept in memory between steps, so a step costs the answers it reads, not a
    reload of the build, a save of its whole state and a scan of its whole queue. The
    state is saved every `save_seconds` (and when the build finishes): answers are in
    the triplets table already, so a worker that dies loses nothing; the next step
    anywhere folds in again what came after the saved cursor. A build someone else saved
    since (another worker, a pause, a replay) is not used: its saved version differs.

    Each upkeep (a comparison of the whole queue, the progress pages show) waits at
    least `upkeep_spacing` times what it last took, so takes at most 2 % of the time, and
    a save `save_spacing` times: at 50,000 items and 5 M answers a save takes one to two
    seconds with the database's write, and a comparison of the whole queue seconds; at a
    fixed pace they took the worker's core (one of two) from the raters' answers, and
    each save showed in their p99. A save every few minutes loses nothing: a restarted
    worker reads the answers since.

    A build waiting for FRESH_PROGRESS_QUERIES queries or more also spaces its steps,
    `step_spacing` times what the last warm one took (MOST_STEP_WAIT at most; the first
    step of a process reads and loads the whole build): none of its nodes is a second from
    splitting for want of a step, and a step there has a fixed cost (its reads and
    writes) that a step every half second paid again and again."""

    def __init__(
        self,
        most: int = 8,
        full_sync_seconds: float = 30.0,
        save_seconds: float = 5.0,
        upkeep_spacing: float = 50.0,
        save_spacing: float = 200.0,
        step_spacing: float = 10.0,
    ) -> None:
        self.most = most
        self.full_sync_seconds = full_sync_seconds
        self.save_seconds = save_seconds
        self.upkeep_spacing = upkeep_spacing
        self.save_spacing = save_spacing
        self.step_spacing = step_spacing
        self._builds: dict[tuple, Warm] = {}  # by cache_key
        self._lock = threading.Lock()

    def take(self, build: Build) -> Warm | None:
        with self._lock:
            warm = self._builds.pop(cache_key(build), None)
        saved = (build.version, build.answers_cursor)
        if warm is None or (warm.saved_version, warm.saved_cursor) != saved:
            return None
        return warm

    def peek_cursor(self, build: Build) -> int:
        """How far this process has read the build's answers (saved or not)."""
        with self._lock:
            warm = self._builds.get(cache_key(build))
        if warm is None or warm.saved_version != build.version:
            return build.answers_cursor
        return warm.cursor

    def unsaved_due(self, build: Build) -> bool:
        """Whether this process folded in answers that no save has kept, and a save is
        due: answers that stop coming ask for no further step, and the saved build (what
        pages, exports and a restarted worker read) would lag behind for good."""
        with self._lock:
            warm = self._builds.get(cache_key(build))
        return (
            warm is not None
            and warm.saved_version == build.version
            and warm.cursor > warm.saved_cursor
            and self.save_due(warm)
        )

    def may_step(self, build: Build) -> bool:
        """Whether a step of `build` may run now (see the class)."""
        with self._lock:
            warm = self._builds.get(cache_key(build))
        if warm is None or len(warm.wanted[0]) < FRESH_PROGRESS_QUERIES:
            return True
        wait = min(self.step_spacing * warm.costs.get("step", 0.0), MOST_STEP_WAIT)
        return time.monotonic() - warm.stepped_at >= wait

    def _due(
        self, warm: Warm | None, upkeep: str, last: str, seconds: float = 0.0, spacing=None
    ) -> bool:
        if warm is None:
            return True
        spacing = self.upkeep_spacing if spacing is None else spacing
        wait = max(seconds, spacing * warm.costs.get(upkeep, 0.0))
        return time.monotonic() - getattr(warm, last) > wait

    def full_sync_due(self, warm: Warm | None) -> bool:
        """Now and then the whole queue is compared again, whatever changed in between
        (slots answered by answers that do not count, say)."""
        return self._due(warm, "full_sync", "full_sync_at", self.full_sync_seconds)

    def save_due(self, warm: Warm | None) -> bool:
        return self._due(warm, "save", "saved_at", self.save_seconds, self.save_spacing)

    def progress_due(self, warm: Warm | None) -> bool:
        """A build waiting for fewer than FRESH_PROGRESS_QUERIES queries shows its
        progress as of every step (it costs a millisecond); a larger one as of at most a
        second or two ago."""
        if warm is not None and len(warm.wanted[0]) < FRESH_PROGRESS_QUERIES:
            return True
        return self._due(warm, "progress", "progress_at")

    def keep(self, build: Build, warm: Warm) -> None:
        with self._lock:
            self._builds[cache_key(build)] = warm
            while len(self._builds) > self.most:
                self._builds.pop(next(iter(self._builds)))


def warm_builds() -> WarmBuilds:
    return caches.current().get("builds.warm", WarmBuilds)


class Timer:
    """Seconds spent on each upkeep of one step, kept for the next step to space them."""

    def __init__(self, costs: dict[str, float]) -> None:
        self.costs = dict(costs)

    def time(self, upkeep: str, work):
        started = time.perf_counter()
        result = work()
        self.costs[upkeep] = time.perf_counter() - started
        return result


def _among(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each of `values` is in `sorted_set` (sorted, distinct): a search per value
    in the small set, where np.isin would sort both."""
    if len(sorted_set) == 0:
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def sync_queue(
    session: Session,
    build: Build,
    builder: CompRFBuilder,
    before: tuple[np.ndarray, np.ndarray] | None,
    touched: np.ndarray | None = None,
    *,
    nodes_changed: bool = True,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Put the queries the build waits for into the scheduler's queue (and nothing else).
    Knowing what it waited for `before`, only the queries whose need changed, or that
    answers just read were about (`touched` keys, sorted and distinct), are written; if
    no node changed either, only those queries are looked at. Returns what it waits for
    now."""
    if build.status is not BuildStatus.running:
        queue.withdraw_slots(session=session, build_id=build.id)
        return None
    if before is not None and not nodes_changed:
        assert touched is not None  # a step that split no node names what it touched
        if len(touched) == 0:
            return before
        changed, wanted = _touched_changes(builder, before, touched)
    else:
        changed, wanted = _all_changes(builder, before, touched)
    changed_keys, changed_queries, changed_needed = changed
    queue.sync_slots(
        session=session,
        project_id=build.project_id,
        wanted=queue.Wanted(
            keys=changed_keys,
            queries=item_ids(build)[changed_queries],
            needed=changed_needed,
            answered=changed_needed < builder.params["answers_per_query"],
        ),
        build_id=build.id,
        complete=before is None,
    )
    return wanted


def _pending_by_key(builder: CompRFBuilder) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    queries, needed = builder.pending_queries(return_needed=True)
    return query_keys(*queries.T), queries, needed


def _all_changes(builder: CompRFBuilder, before, touched):
    """The queries whose need differs from `before` (all of them without it), found by
    comparing the whole pending list."""
    keys, queries, needed = _pending_by_key(builder)
    order = np.argsort(keys)
    keys, queries, needed = keys[order], queries[order], needed[order]
    if before is None:
        return (keys, queries, needed), (keys, needed)
    old_keys, old_needed = before
    if len(old_keys):
        at = np.minimum(np.searchsorted(old_keys, keys), len(old_keys) - 1)
        same = (old_keys[at] == keys) & (old_needed[at] == needed)
        same &= ~_among(keys, touched)
    else:
        same = np.zeros(len(keys), bool)
    gone = old_keys[~np.isin(old_keys, keys, assume_unique=True)]
    changed = (
        np.concatenate([keys[~same], gone]),
        np.concatenate([queries[~same], unpack_query_keys(gone)]),
        np.concatenate([needed[~same], np.zeros(len(gone), np.int64)]),
    )
    return changed, (keys, needed)


def _touched_changes(builder: CompRFBuilder, before, touched):
    """As `_all_changes` when no node split: the open nodes ask what they asked, so a
    query's need changed only if an answer was about it. Costs a pass over the open
    queries, not a sort of them (a tenth of a second a step at 1 M queries)."""
    queries, needed = builder.pending_about(touched)
    keys = query_keys(*queries.T)
    order = np.argsort(keys)
    keys, queries, needed = keys[order], queries[order], needed[order]
    old_keys, old_needed = before
    at = np.searchsorted(old_keys, touched)
    was = at[(at < len(old_keys)) & (old_keys[np.minimum(at, len(old_keys) - 1)] == touched)]
    gone = np.setdiff1d(old_keys[was], keys, assume_unique=True)
    kept_keys, kept_needed = np.delete(old_keys, was), np.delete(old_needed, was)
    waiting = needed > 0
    at = np.searchsorted(kept_keys, keys[waiting])
    changed = (
        np.concatenate([keys, gone]),
        np.concatenate([queries, unpack_query_keys(gone)]),
        np.concatenate([needed, np.zeros(len(gone), np.int64)]),
    )
    wanted = (np.insert(kept_keys, at, keys[waiting]), np.insert(kept_needed, at, needed[waiting]))
    return changed, wanted
