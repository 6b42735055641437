"""CompRF builds in the service: start, fold in answers step by step, pause, resume, cancel.

The builder's state lives in the `builds` row. A step reads the project's answers that
arrived after the build's cursor, folds them into the state and saves it together with
the new cursor in one compare-and-set update, so a crash between steps loses nothing (the
answers are still in `triplets`, the cursor did not move) and two concurrent steps cannot
both save (the loser's update matches no row and is dropped).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app import learn
from app.builds.warm import Timer, Warm, item_ids, sync_queue, warm_builds
from app.core.db import rows_changed
from app.core.errors import Conflict, NotFound, ServiceError
from app.learn.keys import query_keys
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
    items = session.scalar(select(func.count()).select_from(Item).where(*_labelled(project))) or 0
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
    _refuse_unfinished(build)
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
    """The raters whose exclusion changed among those whose answers it read. None while
    the build follows the exclusions (unfinished builds are replayed), and when none of
    the answers it read is of such a rater: building it again would grow the same
    trees."""
    if build.status not in FINAL:
        return None
    now = set(thresholds.excluded_rater_ids(session, build.project_id))
    then = set(build.excluded_rater_ids or [])
    excluded, included = sorted(now - then), sorted(then - now)
    if not excluded and not included:
        return None
    # Their answers it could have read: before its cursor, about its items alone.
    rows = session.execute(
        select(Triplet.rater_id, Triplet.anchor_id, Triplet.closer_id, Triplet.farther_id).where(
            Triplet.project_id == build.project_id,
            Triplet.id <= build.answers_cursor,
            Triplet.is_test.is_(False),
            Triplet.rater_id.in_(excluded + included),
        )
    ).all()
    found = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    read = found[np.isin(found[:, 1:], item_ids(build)).all(axis=1), 0]
    if not len(read):
        return None
    whose = set(read.tolist())
    excluded = [rater for rater in excluded if rater in whose]
    included = [rater for rater in included if rater in whose]
    answers = len(read)
    return ExclusionChange(excluded, included, answers)


@dataclass(frozen=True)
class AgainEstimate:
    """What building a finished build again would ask of raters: the answers the new
    build still needs once it has folded the answers that count now, and the hours that
    is at the project's recent rate."""

    answers: int
    answers_per_hour: float | None
    hours: float | None


def estimate_again(
    *, session: Session, build: Build, answers_per_hour: float | None
) -> AgainEstimate:
    """The new build's first step, taken here and thrown away: its restarted forest
    folds every answer that counts now, and what it still needs is what its progress
    says (the estimate a running build shows)."""
    _refuse_unfinished(build)
    builder = _builder(build).restarted()
    answers, _ = answers_after(session, build.project_id, 0, item_ids(build))
    if len(answers):
        builder.add_answers(answers)
    needed = int(builder.progress()["answers_needed_estimate"])
    hours = needed / answers_per_hour if answers_per_hour else None
    return AgainEstimate(needed, answers_per_hour, hours)


def _refuse_unfinished(build: Build) -> None:
    if build.status not in FINAL:
        raise Conflict(
            f"build {build.id} is {build.status.value}: it is replayed with the answers "
            "that count whenever a rater is excluded or included again"
        )


def _builder(build: Build) -> CompRFBuilder:
    return learn.CompRFBuilder.from_bytes(build.state)


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


def step(*, session: Session, build: Build) -> int:
    """Fold the answers that arrived since the last step into the build; returns how many
    were read. Saves nothing if another step saved first (the caller may simply retry)."""
    if build.status is not BuildStatus.running:
        return 0
    began = time.perf_counter()
    held = warm_builds()
    warm = held.take(build)
    builder = warm.builder if warm is not None else _builder(build)
    read_from = warm.cursor if warm is not None else build.answers_cursor
    answers, cursor = answers_after(session, build.project_id, read_from, item_ids(build))
    splits = builder.add_answers(answers) if len(answers) else 0
    now = time.monotonic()
    timer = Timer(warm.costs if warm is not None else {})
    fresh_progress = builder.is_complete or held.progress_due(warm)
    progress = (
        warm.progress
        if warm is not None and not fresh_progress
        else timer.time("progress", builder.progress)
    )
    save = builder.is_complete or held.save_due(warm)
    values: dict = {"progress": progress}
    save_started = time.perf_counter()
    if save:
        values.update(
            state=builder.to_bytes(),
            answers_cursor=cursor,
            version=build.version + 1,
            status=BuildStatus.complete if builder.is_complete else BuildStatus.running,
        )
    written = rows_changed(
        session.execute(
            update(Build)
            .where(Build.id == build.id, Build.version == build.version)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
    )
    if save:  # what the save costs: the state, and the database's write of it
        timer.costs["save"] = time.perf_counter() - save_started
    if not written:
        return 0
    session.refresh(build)
    full = held.full_sync_due(warm)
    # A query answered now may still be wanted as much as before (two answers that tie
    # want one more): its answered slots are not open, so it is looked at again.
    touched = np.unique(query_keys(*answers.T)) if len(answers) else np.empty(0, np.int64)
    if full or warm is None:  # (a cold step is always a full one)
        wanted = timer.time("full_sync", lambda: sync_queue(session, build, builder, None))
    else:
        before = warm.wanted
        # With no node split, only the queries these answers were about can have changed.
        wanted = sync_queue(session, build, builder, before, touched, nodes_changed=splits > 0)
    if wanted is not None:
        if warm is not None:  # a cold step's load says nothing of the next one's cost
            timer.costs["step"] = time.perf_counter() - began
        held.keep(
            build,
            Warm(
                saved_version=build.version,
                saved_cursor=build.answers_cursor,
                saved_at=warm.saved_at if warm is not None and not save else now,
                cursor=cursor,
                builder=builder,
                wanted=wanted,
                full_sync_at=warm.full_sync_at if warm is not None and not full else now,
                progress=progress,
                progress_at=warm.progress_at if warm is not None and not fresh_progress else now,
                costs=timer.costs,
                stepped_at=time.monotonic(),
            ),
        )
    return len(answers)


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


def may_step(*, build: Build) -> bool:
    """Whether this process may step `build` now: a large build spaces its steps by
    their cost (see WarmBuilds); answers left unread wait for the next request or the
    sweep."""
    return warm_builds().may_step(build)


def has_unread_answers(*, session: Session, build: Build) -> bool:
    """Whether answers arrived that no step read (in this process, or saved)."""
    return readable_bound(session, build.project_id) > warm_builds().peek_cursor(build)


def has_unsaved_answers(*, build: Build) -> bool:
    """Whether this process read answers into the build that a save is now due to keep."""
    return warm_builds().unsaved_due(build)
