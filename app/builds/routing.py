"""Routings: new items routed down every tree of a finished CompRF build.

At each node an item is asked "closer to the left pivot or to the right one?". Those
routing queries go to raters through the scheduler (first in its order) or to a client
that answers them over the API; any answer already held is used. A routing step reads
the answers about the routing's items that arrived since the last step (the same
cursor as a build's), routes as far as they allow and puts the queries still needed
into the queue. Once every item reached a leaf in every tree, the routing holds each
item's label and class shares.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from app.builds import service as builds
from app.builds.warm import PerBuild, item_ids
from app.core import caches
from app.core.errors import Conflict, NotFound, ServiceError
from app.learn.keys import query_keys
from app.models import (
    Build,
    BuildStatus,
    Item,
    Project,
    Routing,
    RoutingStatus,
    Split,
    Triplet,
    TripletSource,
)
from app.scheduling import queue, thresholds
from app.triplets.log import committed_bound, hold_append_lock, item_positions, readable_bound


def _forests() -> PerBuild:
    """Finished forests per process: a build's forest never changes once complete."""
    return caches.current().get("builds.forests", lambda: PerBuild(builds.forest, 4))


def _wanted_items(project_id: int) -> tuple:
    """What a routing routes unless told which: every test and unlabelled item."""
    return (
        Item.project_id == project_id,
        (Item.split == Split.test) | (Item.split == Split.unlabelled),
    )


def wanted_item_count(session: Session, project_id: int) -> int:
    return (
        session.scalar(select(func.count()).select_from(Item).where(*_wanted_items(project_id)))
        or 0
    )


def start_routing(
    *,
    session: Session,
    project: Project,
    build: Build,
    keys: list[str] | None,
    ask_raters: bool = True,
) -> Routing:
    """Route the items named by `keys` (default: every item without a label and every
    test item) down the build's forest."""
    if build.status is not BuildStatus.complete:
        raise Conflict(
            f"build {build.id} is {build.status.value}: it predicts once complete "
            f"({build.queries_pending} queries still wait for answers)"
        )
    if keys is None:
        ids = session.scalars(
            select(Item.id).where(*_wanted_items(project.id)).order_by(Item.id)
        ).all()
    else:
        if not keys:
            raise ServiceError("items is empty: name at least one item key")
        found = dict(
            session.execute(
                select(Item.key, Item.id).where(
                    Item.project_id == project.id, Item.key.in_(set(keys))
                )
            ).all()
        )
        unknown = [key for key in keys if key not in found]
        if unknown:
            raise NotFound(f"unknown items (not in project {project.id}): {unknown[:20]}")
        ids = list(dict.fromkeys(found[key] for key in keys))
    if not ids:
        raise ServiceError("nothing to predict: the project has no test or unlabelled items")
    routing = Routing(
        project_id=project.id, build_id=build.id, item_ids=list(ids), ask_raters=ask_raters
    )
    session.add(routing)
    session.flush()
    step(session=session, routing=routing)
    return routing


def _positions(build: Build, routing: Routing):
    """Forest positions. Items the build was trained on keep their own position, so the
    answers the build holds about them route them again without a question; the other
    items follow the training items. Returns every position's item id, the order that
    sorts them, and the routing's items as positions (in its order)."""
    training = item_ids(build)
    wanted = np.asarray(routing.item_ids, dtype=np.int64)
    training_order = np.argsort(training, kind="stable")
    at = np.minimum(np.searchsorted(training[training_order], wanted), len(training) - 1)
    trained = training[training_order][at] == wanted
    positions = np.empty(len(wanted), np.int64)
    positions[trained] = training_order[at[trained]]
    positions[~trained] = len(training) + np.arange(int((~trained).sum()))
    every = np.concatenate([training, wanted[~trained]])
    return every, np.argsort(every, kind="stable"), positions


def _unread_about(routing: Routing, bound: int) -> tuple:
    """Answers after the routing's cursor, up to `bound`, whose anchor is one of its items."""
    return (
        Triplet.project_id == routing.project_id,
        Triplet.id > routing.answers_cursor,
        Triplet.id <= bound,
        Triplet.anchor_id.in_(routing.item_ids),
        Triplet.is_test.is_(False),
    )


def has_unread_answers(*, session: Session, routing: Routing) -> bool:
    """Whether answers about the routing's items arrived that no step read (an excluded
    rater's too: the step that finds only those moves the cursor past them)."""
    bound = readable_bound(session, routing.project_id)
    found = select(Triplet.id).where(*_unread_about(routing, bound)).limit(1)
    return session.scalar(found) is not None


def _answers_about(session: Session, routing: Routing, every, order):
    """Answers after the cursor whose anchor is one of the routing's items, as forest
    positions; and the new cursor."""
    bound = committed_bound(session, routing.project_id)
    if bound is None:  # writers kept the log busy: nothing new can be read safely now
        return np.empty((0, 3), np.int64), routing.answers_cursor
    query = select(Triplet.anchor_id, Triplet.closer_id, Triplet.farther_id).where(
        *_unread_about(routing, bound)
    )
    excluded = thresholds.excluded_rater_ids(session, routing.project_id)
    if excluded:
        query = query.where(Triplet.rater_id.is_(None) | Triplet.rater_id.not_in(excluded))
    rows = np.array(session.execute(query).all(), dtype=np.int64).reshape(-1, 3)
    at, known = item_positions(every[order], rows)
    return order[at[known]], max(bound, routing.answers_cursor)


def _labelled(classes: np.ndarray, proba: np.ndarray) -> dict:
    """An item's label from its class shares over the trees' leaves; where two or more
    classes share the top share (trees that disagree evenly) there is no label, and the
    tied classes are listed instead."""
    top = np.isclose(proba, proba.max(), rtol=1e-12, atol=1e-12)
    shares = {str(c): float(p) for c, p in zip(classes, proba, strict=True)}
    if top.sum() > 1:
        return {"label": None, "tied": [str(c) for c in classes[top]], "proba": shares}
    return {"label": str(classes[np.argmax(proba)]), "tied": None, "proba": shares}


def step(*, session: Session, routing: Routing) -> Routing:
    if routing.status is not RoutingStatus.routing:
        return routing
    build = session.get_one(Build, routing.build_id)
    forest = _forests().get(build)
    every, order, new = _positions(build, routing)
    held = np.frombuffer(routing.answers, dtype=np.int64).reshape(-1, 3)
    fresh, cursor = _answers_about(session, routing, every, order)
    answers = np.concatenate([held, fresh])
    router = forest.route(new)
    if len(answers):
        router.add_answers(answers)
    values = {"answers": answers.tobytes(), "answers_cursor": cursor}
    if router.is_complete:
        proba = forest.proba_from_leaves(router.leaves())
        keys = dict(
            session.execute(select(Item.id, Item.key).where(Item.id.in_(routing.item_ids))).all()
        )
        values["status"] = RoutingStatus.complete
        values["result"] = {
            keys[item]: _labelled(forest.classes_, row)
            for item, row in zip(routing.item_ids, proba, strict=True)
        }
        values["progress"] = {"queries_pending": 0, "items": len(new), "items_done": len(new)}
        queue.withdraw_slots(session=session, routing_id=routing.id)
    else:
        queries, needed = router.pending_queries(return_needed=True)
        waiting_items = len(np.unique(queries[:, 0]))
        values["progress"] = {
            "queries_pending": int(needed.sum()),
            "items": len(new),
            "items_done": len(new) - waiting_items,
        }
        if routing.ask_raters:
            queue.sync_slots(
                session=session,
                project_id=routing.project_id,
                wanted=queue.Wanted(
                    keys=query_keys(*queries.T),
                    queries=every[queries],
                    needed=needed,
                    answered=needed < forest.answers_per_query,
                ),
                routing_id=routing.id,
            )
    session.execute(
        update(Routing)
        .where(Routing.id == routing.id)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    session.refresh(routing)
    return routing


def pending_by_key(*, session: Session, routing: Routing) -> list[dict]:
    """The routing queries still needed, by item key, for a client answering them."""
    if routing.status is not RoutingStatus.routing:
        return []
    build = session.get_one(Build, routing.build_id)
    forest = _forests().get(build)
    every, order, new = _positions(build, routing)
    router = forest.route(new)
    held = np.frombuffer(routing.answers, dtype=np.int64).reshape(-1, 3)
    if len(held):
        router.add_answers(held)
    queries, needed = router.pending_queries(return_needed=True)
    return builds.queries_by_key(session, every[queries], needed)


@dataclass(frozen=True)
class RoutedTestSplit:
    """How a build's forest labels the researcher's test split: by the newest complete
    routing that routed test items (accuracy among the test items it gave a label, and
    the share of all test items it gave one: an unrouted or tied item has none), with
    the answers the build and that routing read."""

    accuracy: float
    coverage: float
    answers: int
    routing_id: int


def newest_routing(session: Session, build_id: int, *, complete: bool = False) -> Routing | None:
    """The build's newest routing that was not cancelled (or that completed)."""
    wanted = (
        Routing.status == RoutingStatus.complete
        if complete
        else Routing.status != RoutingStatus.cancelled
    )
    return session.scalars(
        select(Routing)
        .where(Routing.build_id == build_id, wanted)
        .order_by(Routing.id.desc())
        .limit(1)
    ).first()


# Where a client routes a few items at a time, the newest routing of test items may sit
# behind many others; the standings look no further back than this.
_NEWEST_SEARCHED = 50


def routing_of_test_split(*, session: Session, build: Build) -> RoutedTestSplit | None:
    """The forest measured on the test split, or None where no complete routing
    routed a labelled test item."""
    truth = dict(
        session.execute(
            select(Item.id, Item.label).where(
                Item.project_id == build.project_id,
                Item.split == Split.test,
                Item.label.is_not(None),
            )
        ).all()
    )
    if not truth:
        return None
    # Which items each routing holds first; the one routing measured is read in full
    # (its answers only by their length: a page refreshing every 2 s reads this).
    completed = session.execute(
        select(Routing.id, Routing.item_ids)
        .where(Routing.build_id == build.id, Routing.status == RoutingStatus.complete)
        .order_by(Routing.id.desc())
        .limit(_NEWEST_SEARCHED)
    )
    for routing_id, routed_ids in completed:  # noqa: B007 - the one found is used below
        routed = [item for item in routed_ids if item in truth]
        if routed:
            break
    else:
        return None
    result, answer_bytes = session.execute(
        select(Routing.result, func.length(Routing.answers)).where(Routing.id == routing_id)
    ).one()
    keys = dict(session.execute(select(Item.id, Item.key).where(Item.id.in_(routed))).all())
    said = [result[keys[item]]["label"] for item in routed]
    right = [label == str(truth[item]) for label, item in zip(said, routed, strict=True)]
    spoke = sum(label is not None for label in said)
    return RoutedTestSplit(
        accuracy=sum(right) / spoke if spoke else 0.0,
        coverage=spoke / len(truth),
        answers=build.queries_answered + (answer_bytes or 0) // (3 * 8),
        routing_id=routing_id,
    )


def get_routing(*, session: Session, project: Project, routing_id: int) -> Routing:
    routing = session.get(Routing, routing_id)
    if routing is None or routing.project_id != project.id:
        raise NotFound(f"no routing {routing_id} in project {project.id}")
    return routing


def unfinished(*, session: Session) -> list[Routing]:
    return list(session.scalars(select(Routing).where(Routing.status == RoutingStatus.routing)))


def add_answers(
    *, session: Session, routing: Routing, answers: list[tuple[str, str, str]]
) -> Routing:
    """A client's answers to routing queries, by item key: stored as triplets (they count
    for every learner), then folded in at once."""
    if not answers:
        raise ServiceError("answers is empty: send at least one [anchor, closer, farther]")
    keys = {key for row in answers for key in row}
    ids = dict(
        session.execute(
            select(Item.key, Item.id).where(
                Item.project_id == routing.project_id, Item.key.in_(keys)
            )
        ).all()
    )
    rows = []
    for number, (anchor, closer, farther) in enumerate(answers, start=1):
        unknown = [key for key in (anchor, closer, farther) if key not in ids]
        if unknown:
            raise ServiceError(f"answer {number}: unknown item(s) {unknown}")
        if len({anchor, closer, farther}) < 3:
            raise ServiceError(f"answer {number}: a triplet needs three different items")
        rows.append(
            {
                "project_id": routing.project_id,
                "anchor_id": ids[anchor],
                "closer_id": ids[closer],
                "farther_id": ids[farther],
                "source": TripletSource.oracle,
                "adaptive": True,  # a routing step's question
            }
        )
    hold_append_lock(session, routing.project_id)
    session.execute(insert(Triplet), rows)
    return step(session=session, routing=routing)
