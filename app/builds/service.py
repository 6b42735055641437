"""CompRF builds in the service: start, fold in answers step by step, pause, resume, cancel.

The builder's state lives in the `builds` row. A step reads the project's answers that
arrived after the build's cursor, folds them into the state and saves it together with
the new cursor in one compare-and-set update, so a crash between steps loses nothing (the
answers are still in `triplets`, the cursor did not move) and two concurrent steps cannot
both save (the loser's update matches no row and is dropped).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app import learn
from app.core import caches
from app.core.errors import Conflict, NotFound, ServiceError
from app.learn.keys import query_keys, unpack_query_keys
from app.learn.subtrees import expected_subtree_queries
from app.models import Build, BuildStatus, Item, LabelType, Project, Split, Triplet
from app.scheduling import queue, thresholds
from app.triplets.log import committed_bound, item_positions, readable_bound
from app.triplets.tally import answer_count

if TYPE_CHECKING:
    from app.learn import CompRF, CompRFBuilder

ANSWER_BATCH = 200_000
FINAL = (BuildStatus.cancelled, BuildStatus.complete)


@dataclass(frozen=True)
class BuildParams:
    n_trees: int = 100
    leaf_size: int = 1
    subsample: float = 1.0
    answers_per_query: int = 1
    random_state: int | None = None
    sort_size: int = 1


def _labelled(project: Project) -> tuple:
    """The items a build learns from: labelled, outside the test split."""
    return (Item.project_id == project.id, Item.label.is_not(None), Item.split != Split.test)


def _labelled_items(session: Session, project: Project) -> tuple[np.ndarray, np.ndarray]:
    rows = session.execute(
        select(Item.id, Item.label).where(*_labelled(project)).order_by(Item.id)
    ).all()
    ids = np.array([row.id for row in rows], dtype=np.int64)
    labels = [row.label for row in rows]
    if project.label_type is LabelType.regression:
        return ids, np.array(labels, dtype=np.float64)
    return ids, np.array(labels, dtype=object).astype(str)


def start_build(*, session: Session, project: Project, params: BuildParams) -> Build:
    """A build over the project's labelled items (test items left out), with any answers
    already held folded in at once."""
    ids, labels = _labelled_items(session, project)
    if len(ids) < 2:
        raise ServiceError(
            f"a build needs at least 2 labelled items outside the test split; "
            f"project {project.id} has {len(ids)}"
        )
    task = "regression" if project.label_type is LabelType.regression else "classification"
    try:
        builder = learn.CompRFBuilder(
            np.arange(len(ids)),
            labels,
            n_trees=params.n_trees,
            leaf_size=params.leaf_size,
            subsample=params.subsample,
            task=task,
            answers_per_query=params.answers_per_query,
            random_state=params.random_state,
        )
    except ValueError as error:
        raise ServiceError(str(error)) from error
    return _begin(session, project.id, {**params.__dict__, "task": task}, builder, ids.tobytes())


# A first step in the request serves the build's questions at once. Past these sizes it
# would hold the request for minutes (50,000 items and 5 M answers held: over two), and
# the worker's step, queued beside it by whoever starts a build, does it instead.
INLINE_STEP_ANSWERS = 200_000
INLINE_STEP_QUERIES = 200_000


def _inline_step_affordable(session: Session, project_id: int, params: dict, items: bytes) -> bool:
    root_queries = params["n_trees"] * (len(items) // 8) * params.get("subsample", 1.0)
    return (
        root_queries <= INLINE_STEP_QUERIES
        and answer_count(session, project_id) <= INLINE_STEP_ANSWERS
    )


def _begin(
    session: Session, project_id: int, params: dict, builder: CompRFBuilder, items: bytes
) -> Build:
    """A new build in the database, recording the raters its answers leave out, with
    the answers already held folded in at once where that is quick (else by the step
    queued with it)."""
    build = Build(
        project_id=project_id,
        params=params,
        state=builder.to_bytes(),
        items=items,
        excluded_rater_ids=thresholds.excluded_rater_ids(session, project_id),
        sort_size=params.get("sort_size", 1),
    )
    session.add(build)
    session.flush()
    if _inline_step_affordable(session, project_id, params, items):
        step(session=session, build=build)
    return build


@dataclass(frozen=True)
class BuildEstimate:
    """What a build with these settings would ask of raters, before it starts: its items
    (labelled, outside the test split), the queries its trees are expected to ask, the
    answers they take and the screens that shows raters (fewer on sorting screens), and
    the hours that is at the project's recent answer rate."""

    items: int
    items_per_tree: int
    queries: int
    answers: int
    answers_per_hour: float | None
    hours: float | None
    screens: int = 0


def estimate(
    *, session: Session, project: Project, params: BuildParams, answers_per_hour: float | None
) -> BuildEstimate:
    """The expected cost, from the same count of a subtree's queries the running build's
    progress uses (within 5% at the start, offline on digits). Answers already held for
    the same queries are used first, so this is what it asks at most."""
    # Counted, not read: the builds page estimates on every visit (50,000 items read as
    # rows took 180 ms of it).
    items = session.scalar(select(func.count()).select_from(Item).where(*_labelled(project)))
    per_tree = items if params.subsample == 1 else max(2, int(round(params.subsample * items)))
    per_tree = min(per_tree, items)
    queries = screens = 0
    if per_tree >= 2:
        expected = expected_subtree_queries(np.array([per_tree]), params.leaf_size)
        queries = int(round(max(0.0, float(expected[0])) * params.n_trees))
        sorted_on = expected_subtree_queries(
            np.array([per_tree]), params.leaf_size, params.sort_size
        )
        screens = int(round(max(0.0, float(sorted_on[0])) * params.n_trees))
    answers = queries * params.answers_per_query
    hours = answers / answers_per_hour if answers_per_hour else None
    screens *= params.answers_per_query
    return BuildEstimate(items, per_tree, queries, answers, answers_per_hour, hours, screens)


def build_again(*, session: Session, build: Build) -> Build:
    """A new build as `build` started: its items, settings and seed, folding the answers
    that count now (the raters excluded since left out); it asks raters only what those
    answers leave open. The finished build and any model on it stay as they are."""
    if build.status not in FINAL:
        raise Conflict(
            f"build {build.id} is {build.status.value}: it is replayed with the answers "
            "that count whenever a rater is excluded or included again"
        )
    restarted = _builder(build).restarted()
    return _begin(session, build.project_id, dict(build.params), restarted, build.items)


@dataclass(frozen=True)
class ExclusionChange:
    """How the raters' exclusions moved since a finished build last read its answers:
    raters excluded since (their answers are still in its trees) and included again (it
    left theirs out), with the answers at stake."""

    excluded: list[int]
    included: list[int]
    answers: int


def exclusion_change(session: Session, build: Build) -> ExclusionChange | None:
    """None while the build follows the exclusions (unfinished builds are replayed)."""
    if build.status not in FINAL:
        return None
    now = set(thresholds.excluded_rater_ids(session, build.project_id))
    then = set(build.excluded_rater_ids or [])
    excluded, included = sorted(now - then), sorted(then - now)
    if not excluded and not included:
        return None
    answers = session.scalar(
        select(func.count()).where(
            Triplet.project_id == build.project_id,
            Triplet.id <= build.answers_cursor,
            Triplet.is_test.is_(False),
            Triplet.rater_id.in_(excluded + included),
        )
    )
    return ExclusionChange(excluded, included, int(answers or 0))


def _builder(build: Build) -> CompRFBuilder:
    return learn.CompRFBuilder.from_bytes(build.state)


def item_ids(build: Build) -> np.ndarray:
    return np.frombuffer(build.items, dtype=np.int64)


def answers_after(
    session: Session, project_id: int, cursor: int, ids: np.ndarray
) -> tuple[np.ndarray, int]:
    """Answers after `cursor` about the items `ids` (sorted), as positions in `ids`, and
    the id of the last triplet read. Answers of excluded raters are left out."""
    bound = committed_bound(session, project_id)
    if bound is None:  # writers kept the log busy: nothing new can be read safely now
        return np.empty((0, 3), np.int64), cursor
    # The researcher's test split measures models; it never grows a tree.
    query = select(Triplet.id, Triplet.anchor_id, Triplet.closer_id, Triplet.farther_id).where(
        Triplet.project_id == project_id, Triplet.id <= bound, Triplet.is_test.is_(False)
    )
    excluded = thresholds.excluded_rater_ids(session, project_id)
    if excluded:
        query = query.where(Triplet.rater_id.is_(None) | Triplet.rater_id.not_in(excluded))
    batches = []
    while True:
        rows = session.execute(
            query.where(Triplet.id > cursor).order_by(Triplet.id).limit(ANSWER_BATCH)
        ).all()
        if not rows:
            break
        block = np.array(rows, dtype=np.int64)
        cursor = int(block[-1, 0])
        positions, known = item_positions(ids, block[:, 1:])
        batches.append(positions[known])
        if len(rows) < ANSWER_BATCH:
            break
    answers = np.concatenate(batches) if batches else np.empty((0, 3), np.int64)
    return answers, max(cursor, bound)


@dataclass
class _Warm:
    """A build held in this process between steps: the builder with every answer up to
    `cursor` folded in, the version and cursor it was last saved at (together they fix
    the saved state), and the queue it asked for last."""

    saved_version: int
    saved_cursor: int
    saved_at: float
    cursor: int
    builder: CompRFBuilder
    wanted: tuple[np.ndarray, np.ndarray]  # query keys (sorted) and answers needed
    full_sync_at: float  # when the whole queue was last compared with the build


def cache_key(build: Build) -> tuple:
    """What a process keeps a build's forest or warm state by: its id and creation time
    together, since SQLite gives a new row the id of the newest deleted one."""
    return build.id, build.created_at


class _WarmBuilds:
    """Builds kept in memory between steps, so a step costs the answers it reads, not a
    reload of the build, a save of its whole state and a scan of its whole queue. The
    state is saved every `save_seconds` (and when the build finishes): answers are in
    the triplets table already, so a worker that dies loses nothing; the next step
    anywhere folds in again what came after the saved cursor. A build someone else saved
    since (another worker, a pause, a replay) is not used: its saved version differs."""

    def __init__(
        self, most: int = 8, full_sync_seconds: float = 30.0, save_seconds: float = 5.0
    ) -> None:
        self.most = most
        self.full_sync_seconds = full_sync_seconds
        self.save_seconds = save_seconds
        self._builds: dict[tuple, _Warm] = {}  # by cache_key
        self._lock = threading.Lock()

    def take(self, build: Build) -> _Warm | None:
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

    def full_sync_due(self, warm: _Warm | None) -> bool:
        """Now and then the whole queue is compared again, whatever changed in between
        (slots answered by answers that do not count, say)."""
        return warm is None or time.monotonic() - warm.full_sync_at > self.full_sync_seconds

    def save_due(self, warm: _Warm | None) -> bool:
        return warm is None or time.monotonic() - warm.saved_at > self.save_seconds

    def keep(self, build: Build, warm: _Warm) -> None:
        with self._lock:
            self._builds[cache_key(build)] = warm
            while len(self._builds) > self.most:
                self._builds.pop(next(iter(self._builds)))


def _warm() -> _WarmBuilds:
    return caches.current().get("builds.warm", _WarmBuilds)


def step(*, session: Session, build: Build) -> int:
    """Fold the answers that arrived since the last step into the build; returns how many
    were read. Saves nothing if another step saved first (the caller may simply retry)."""
    if build.status is not BuildStatus.running:
        return 0
    warm_builds = _warm()
    warm = warm_builds.take(build)
    builder = warm.builder if warm is not None else _builder(build)
    read_from = warm.cursor if warm is not None else build.answers_cursor
    answers, cursor = answers_after(session, build.project_id, read_from, item_ids(build))
    if len(answers):
        builder.add_answers(answers)
    now = time.monotonic()
    progress = builder.progress()
    save = builder.is_complete or warm_builds.save_due(warm)
    values: dict = {"progress": progress}
    if save:
        values.update(
            state=builder.to_bytes(),
            answers_cursor=cursor,
            version=build.version + 1,
            status=BuildStatus.complete if builder.is_complete else BuildStatus.running,
        )
    written = session.execute(
        update(Build)
        .where(Build.id == build.id, Build.version == build.version)
        .values(**values)
        .execution_options(synchronize_session=False)
    ).rowcount
    if not written:
        return 0
    session.refresh(build)
    full = warm_builds.full_sync_due(warm)
    # A query answered now may still be wanted as much as before (two answers that tie
    # want one more): its answered slots are not open, so it is looked at again.
    touched = query_keys(*answers.T) if len(answers) else np.empty(0, np.int64)
    wanted = _sync_queue(session, build, builder, None if full else warm.wanted, touched)
    if wanted is not None:
        warm_builds.keep(
            build,
            _Warm(
                saved_version=build.version,
                saved_cursor=build.answers_cursor,
                saved_at=now if save else warm.saved_at,
                cursor=cursor,
                builder=builder,
                wanted=wanted,
                full_sync_at=now if full else warm.full_sync_at,
            ),
        )
    return len(answers)


def _sync_queue(
    session: Session,
    build: Build,
    builder: CompRFBuilder,
    before: tuple[np.ndarray, np.ndarray] | None,
    touched: np.ndarray,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Put the queries the build waits for into the scheduler's queue (and nothing else).
    Knowing what it waited for `before`, only the queries whose need changed, or that
    answers just read were about (`touched` keys), are written. Returns what it waits
    for now."""
    if build.status is not BuildStatus.running:
        queue.withdraw_slots(session=session, build_id=build.id)
        return None
    queries, needed = builder.pending_queries(return_needed=True)
    keys = query_keys(*queries.T)
    order = np.argsort(keys)
    keys, queries, needed = keys[order], queries[order], needed[order]
    if before is None:
        changed_keys, changed_queries, changed_needed = keys, queries, needed
    else:
        old_keys, old_needed = before
        if len(old_keys):
            at = np.minimum(np.searchsorted(old_keys, keys), len(old_keys) - 1)
            same = (old_keys[at] == keys) & (old_needed[at] == needed)
            same &= ~np.isin(keys, touched)
        else:
            same = np.zeros(len(keys), bool)
        gone = old_keys[~np.isin(old_keys, keys, assume_unique=True)]
        changed_keys = np.concatenate([keys[~same], gone])
        changed_queries = np.concatenate([queries[~same], unpack_query_keys(gone)])
        changed_needed = np.concatenate([needed[~same], np.zeros(len(gone), np.int64)])
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
    return keys, needed


def replay(*, session: Session, build: Build) -> Build:
    """Start the build over from the answers that count now (after raters were excluded
    or included again): the same seed and items; the next step folds every counted
    answer in anew. A finished build keeps its forest."""
    if build.status in FINAL:
        return build
    build.state = _builder(build).restarted().to_bytes()
    build.excluded_rater_ids = thresholds.excluded_rater_ids(session, build.project_id)
    build.answers_cursor = 0
    build.version += 1
    session.flush()
    return build


def unfinished_builds(*, session: Session, project_id: int) -> list[Build]:
    return list(
        session.scalars(
            select(Build).where(Build.project_id == project_id, Build.status.not_in(FINAL))
        )
    )


def _current_builder(session: Session, build: Build) -> CompRFBuilder:
    """The build as of now: its saved state with the answers since folded in (a worker
    saves every few seconds only). A copy of its own: workers may hold theirs."""
    builder = _builder(build)
    answers, _ = answers_after(session, build.project_id, build.answers_cursor, item_ids(build))
    if len(answers):
        builder.add_answers(answers)
    return builder


def pending_queries(*, session: Session, build: Build) -> np.ndarray:
    """The queries the build waits for, as item ids ``(anchor, p, q)``."""
    if build.status is not BuildStatus.running:
        return np.empty((0, 3), np.int64)
    return item_ids(build)[_current_builder(session, build).pending_queries()]


def set_status(*, session: Session, build: Build, status: BuildStatus) -> Build:
    """Pause, resume or cancel; a finished build stays as it is."""
    allowed = {
        BuildStatus.paused: (BuildStatus.running,),
        BuildStatus.running: (BuildStatus.paused,),
        BuildStatus.cancelled: (BuildStatus.running, BuildStatus.paused),
    }
    if status not in allowed:  # pragma: no cover - the routes only offer these three
        raise ServiceError(f"a build can be paused, resumed or cancelled, not set to {status}")
    if build.status is status:
        return build
    if build.status not in allowed[status]:
        raise Conflict(f"build {build.id} is {build.status.value}: it cannot become {status.value}")
    build.status = status
    build.version += 1
    session.flush()
    if status is BuildStatus.running:
        step(session=session, build=build)
    else:
        queue.withdraw_slots(session=session, build_id=build.id)
    return build


def forest(build: Build) -> CompRF:
    if build.status is not BuildStatus.complete:
        raise Conflict(
            f"build {build.id} is {build.status.value}: "
            f"{build.queries_pending} queries still wait for answers"
        )
    return _builder(build).forest()


def get_build(*, session: Session, project: Project, build_id: int) -> Build:
    build = session.get(Build, build_id)
    if build is None or build.project_id != project.id:
        raise NotFound(f"no build {build_id} in project {project.id}")
    return build


def list_builds(*, session: Session, project: Project) -> list[Build]:
    return list(
        session.scalars(select(Build).where(Build.project_id == project.id).order_by(Build.id))
    )


def pending_by_key(*, session: Session, build: Build, limit: int) -> list[dict]:
    """The build's waiting queries with item keys, as a client answering them needs."""
    if build.status is not BuildStatus.running:
        return []
    builder = _current_builder(session, build)
    queries, needed = builder.pending_queries(return_needed=True)
    return queries_by_key(session, item_ids(build)[queries[:limit]], needed[:limit])


def queries_by_key(session: Session, queries: np.ndarray, needed: np.ndarray) -> list[dict]:
    """Queries ``(anchor, left, right)`` given as item ids, with item keys instead."""
    keys = dict(
        session.execute(
            select(Item.id, Item.key).where(Item.id.in_(set(queries.ravel().tolist())))
        ).all()
    )
    return [
        {"anchor": keys[a], "left": keys[p], "right": keys[q], "needed": int(n)}
        for (a, p, q), n in zip(queries.tolist(), needed.tolist(), strict=True)
    ]


def has_unread_answers(*, session: Session, build: Build) -> bool:
    """Whether answers arrived that no step read (in this process, or saved)."""
    return readable_bound(session, build.project_id) > _warm().peek_cursor(build)


def has_unsaved_answers(*, build: Build) -> bool:
    """Whether this process read answers into the build that a save is now due to keep."""
    return _warm().unsaved_due(build)
