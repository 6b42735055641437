"""Deleting an item a researcher no longer wants (a broken image, a duplicate, an item
uploaded by mistake), and what goes with it.

Its answers go too: every triplet that names it (as anchor or candidate), and every
query served or waiting that names it, so nobody is asked about it again. A build whose
trees hold it keeps it: CompRF asks raters about the items in its trees while it grows
and again whenever it places a new item, so the item stays while such a build runs or
serves (a cancelled build asks nothing). Models fitted before keep showing it until
their next fit. The items page and the JSON API both come here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from app.builds.service import item_ids
from app.core.db import on_commit, ordinal_in_project, rows_changed
from app.core.errors import Conflict
from app.designs import versions
from app.items.images import ImageStore
from app.models import (
    Assignment,
    Build,
    BuildStatus,
    Item,
    Judgement,
    Project,
    QuerySlot,
    Triplet,
)
from app.models.queue import Routing, RoutingStatus
from app.triplets import tally


def _withdraw_screens_showing(session: Session, project_id: int, item_id: int) -> int:
    """Screens (odd-one-out, rank, sorting) that showed the item, among their middle
    items their key does not name: read in batches, and deleted. A sorting screen's
    other items, not answered yet, go with it, and their slots are free again at once."""
    showing = [
        assignment_id
        for assignment_id, shown in session.execute(
            select(Assignment.id, Assignment.shown)
            .where(Assignment.project_id == project_id, Assignment.shown.is_not(None))
            .execution_options(yield_per=5_000)
        )
        if item_id in shown
    ]
    withdrawn = len(showing)
    for start in range(0, len(showing), 5_000):
        chunk = showing[start : start + 5_000]
        others = delete(Assignment).where(
            Assignment.screen_id.in_(chunk), Assignment.answered_at.is_(None)
        )
        freed = session.scalars(others.returning(Assignment.slot_id)).all()
        withdrawn += len(freed)
        session.execute(
            update(QuerySlot)
            .where(QuerySlot.id.in_([slot for slot in freed if slot is not None]))
            .values(lease_rater_id=None, lease_expires_at=None)
            .execution_options(synchronize_session=False)
        )
        session.execute(delete(Assignment).where(Assignment.id.in_(chunk)))
    return withdrawn


@dataclass(frozen=True)
class ItemDeleted:
    key: str
    answers_deleted: int  # triplets that named the item
    queries_withdrawn: int  # queries served or waiting that named it


def _names(anchor, first, second, item_id: int):
    return or_(anchor == item_id, first == item_id, second == item_id)


def _holding_builds(session: Session, project: Project, item: Item) -> list[str]:
    """The builds that still ask about the item, as the Builds page names them."""
    held = []
    for build in session.scalars(
        select(Build).where(
            Build.project_id == project.id,
            Build.status.in_((BuildStatus.running, BuildStatus.paused, BuildStatus.complete)),
        )
    ):
        if np.any(item_ids(build) == item.id):
            number = ordinal_in_project(session, Build, project.id, build.id)
            held.append(f"build {number} ({build.status.value})")
    return held


def _routing_it(session: Session, project: Project, item: Item) -> bool:
    return any(
        item.id in (routing.item_ids or [])
        for routing in session.scalars(
            select(Routing).where(
                Routing.project_id == project.id, Routing.status == RoutingStatus.routing
            )
        )
    )


def delete_item(
    *, session: Session, store: ImageStore, project: Project, item: Item
) -> ItemDeleted:
    """Delete the item with its answers and queries (409, saying why, while a build or
    a routing still asks about it). Its image file goes once the deletion commits,
    unless another item shows the same file."""
    held = _holding_builds(session, project, item)
    if held:
        raise Conflict(
            f"item '{item.key}' is in the trees of {', '.join(held)}: CompRF asks raters "
            "about it while that build runs and whenever it places a new item, so it stays "
            "while the build does (a cancelled build asks nothing)"
        )
    if _routing_it(session, project, item):
        raise Conflict(
            f"item '{item.key}' is being placed in a forest by raters' answers right now; "
            "delete it once that routing ends"
        )
    naming = _names(Triplet.anchor_id, Triplet.closer_id, Triplet.farther_id, item.id)
    # A judgement that showed the item goes whole, with every triplet it implied: what
    # is left of a screen without one of its items is not what the person answered.
    judged = session.scalars(
        select(Triplet.judgement_id)
        .where(Triplet.project_id == project.id, naming, Triplet.judgement_id.is_not(None))
        .distinct()
    ).all()
    if judged:
        naming = or_(naming, Triplet.judgement_id.in_(judged))
    answers = tally.forget(session, project.id, naming)
    session.execute(delete(Triplet).where(Triplet.project_id == project.id, naming))
    if judged:
        session.execute(
            delete(Judgement).where(Judgement.project_id == project.id, Judgement.id.in_(judged))
        )
    # Screens that show the item, before the rows naming it go (a sorting screen's first
    # item names it: its other items are found through it).
    withdrawn = _withdraw_screens_showing(session, project.id, item.id)
    # Slots first: an assignment's slot is looked up by id, and one left would be served.
    session.execute(
        delete(QuerySlot).where(
            QuerySlot.project_id == project.id,
            _names(QuerySlot.anchor_id, QuerySlot.lo_id, QuerySlot.hi_id, item.id),
        )
    )
    withdrawn += rows_changed(
        session.execute(
            delete(Assignment).where(
                Assignment.project_id == project.id,
                _names(Assignment.anchor_id, Assignment.lo_id, Assignment.hi_id, item.id),
            )
        )
    )
    image = item.image_file
    key = item.key
    versions.before_change(session=session, project=project)
    session.delete(item)
    # Every process's copy of the study (and of its item ids) is read again: none draws
    # a random query with the item after this commits.
    project.settings_version += 1
    session.flush()
    versions.record(session=session, project=project)
    if image:
        shared = session.scalar(
            select(func.count()).where(Item.project_id == project.id, Item.image_file == image)
        )
        if not shared:
            on_commit(session, lambda: store.remove(project.id, [image]))
    return ItemDeleted(key=key, answers_deleted=answers, queries_withdrawn=int(withdrawn or 0))
