"""The queue as its owners want it: a CompRF build or a routing says which
queries it waits for and how many answers each still needs, and its open slots are made
to match; the scheduler (app/scheduling/service.py) serves them to raters."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from app.models import Purpose, QuerySlot, SlotState
from app.models._types import utcnow
from app.scheduling.statements import IS_OPEN


@dataclass(frozen=True)
class Wanted:
    """What a build (or routing) waits for: per query, a key unique within its owner,
    the items ``(anchor, p, q)``, how many more answers, and whether it holds any yet."""

    keys: np.ndarray
    queries: np.ndarray
    needed: np.ndarray
    answered: np.ndarray


def sync_slots(
    *,
    session: Session,
    project_id: int,
    wanted: Wanted,
    build_id: int | None = None,
    routing_id: int | None = None,
    complete: bool = True,
) -> tuple[int, int]:
    """Make the open slots of one build (or routing) match what it waits for: slots
    are added where too few are open and withdrawn (free ones first) where too many are.
    With `complete`, `wanted` lists everything the owner waits for and any other open
    slot is withdrawn; otherwise only the listed queries are looked at (a query with 0
    needed loses its slots): the cheap update after a step that touched a few queries.
    Returns (added, withdrawn)."""
    owner = (
        QuerySlot.build_id == build_id
        if build_id is not None
        else (QuerySlot.routing_id == routing_id)
    )
    columns = (QuerySlot.id, QuerySlot.query_key, QuerySlot.lease_expires_at)
    if complete:
        rows = session.execute(select(*columns).where(owner, IS_OPEN)).all()
    else:
        rows = []
        for chunk in _chunks(wanted.keys.tolist(), 5_000):
            rows += session.execute(
                select(*columns).where(owner, IS_OPEN, QuerySlot.query_key.in_(chunk))
            ).all()
    open_slots: dict[int, list] = {}
    for row in rows:
        open_slots.setdefault(row.query_key, []).append(row)

    now = utcnow()
    first = Purpose.routing if routing_id is not None else Purpose.build
    lo = np.minimum(wanted.queries[:, 1], wanted.queries[:, 2]).tolist()
    hi = np.maximum(wanted.queries[:, 1], wanted.queries[:, 2]).tolist()
    new_rows = []
    withdraw: list[int] = []
    for index, (key, count, held) in enumerate(
        zip(wanted.keys.tolist(), wanted.needed.tolist(), wanted.answered.tolist(), strict=True)
    ):
        have = open_slots.pop(key, [])
        for extra in range(count - len(have)):
            fresh = not held and not have and extra == 0
            priority = first if fresh or first is Purpose.routing else Purpose.majority
            new_rows.append(
                {
                    "project_id": project_id,
                    "priority": int(priority),
                    "build_id": build_id,
                    "routing_id": routing_id,
                    "query_key": key,
                    "anchor_id": int(wanted.queries[index, 0]),
                    "lo_id": lo[index],
                    "hi_id": hi[index],
                    "state": SlotState.open,
                    "created_at": now,
                }
            )
        if len(have) > count:
            withdraw += _surplus(have, len(have) - count, now)
    for have in open_slots.values():
        withdraw += [row.id for row in have]
    if new_rows:
        session.execute(insert(QuerySlot), new_rows)
    for chunk in _chunks(withdraw, 5_000):
        session.execute(
            update(QuerySlot)
            .where(QuerySlot.id.in_(chunk), IS_OPEN)
            .values(state=SlotState.withdrawn)
            .execution_options(synchronize_session=False)
        )
    return len(new_rows), len(withdraw)


def _surplus(slots: list, count: int, now: datetime) -> list[int]:
    """`count` slots to withdraw, free ones before leased ones."""
    leased = [
        row for row in slots if row.lease_expires_at is not None and row.lease_expires_at >= now
    ]
    free = [row for row in slots if row not in leased]
    return [row.id for row in (free + leased)[:count]]


def _chunks(values: list, size: int) -> Iterable[list]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def withdraw_slots(
    *, session: Session, build_id: int | None = None, routing_id: int | None = None
) -> None:
    """Withdraw every open slot of a build or routing (paused, cancelled, complete)."""
    owner = (
        QuerySlot.build_id == build_id
        if build_id is not None
        else (QuerySlot.routing_id == routing_id)
    )
    session.execute(
        update(QuerySlot)
        .where(owner, IS_OPEN)
        .values(state=SlotState.withdrawn)
        .execution_options(synchronize_session=False)
    )
