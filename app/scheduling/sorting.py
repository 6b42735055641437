"""Sorting screens: a CompRF node's items beside its two pivots, each to be put with the
pivot it resembles more. A build with `sort_size` m > 1 asks its queries this way: the
rater who leases one of its slots also leases up to m - 1 more of the same node (same
build and pivots, items they were never asked about) and sees them on one screen.

Each item stays an ordinary triplet assignment (item, pivots) with its own slot and
choice, the first holding the screen's items (`shown`) and the others pointing to it
(`screen_id`): the triplets' rules hold item by item. A rater is never asked a query
twice, each slot is answered or given back on "can't tell", and the build folds the
answers in as any others, so it grows the same trees as one triplet a screen would.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Row, bindparam, insert, select, update
from sqlalchemy.orm import Session

from app.core.db import FastStatement
from app.formats import SORT
from app.models import Assignment, Build, QuerySlot
from app.scheduling.statements import IS_OPEN, NOW, lease_free, seen_by_rater

# A build's sorting screens show at most this many items (the page lays out 12 beside
# the two pivots on a phone).
MOST_SORTED = 12

SORT_SIZE = FastStatement(select(Build.sort_size).where(Build.id == bindparam("build")))


def _siblings(postgres: bool):
    """Free open slots of the same build and pivots whose query the rater never saw."""
    query = (
        select(QuerySlot.id, QuerySlot.anchor_id, QuerySlot.priority)
        .where(
            QuerySlot.build_id == bindparam("build"),
            IS_OPEN,
            QuerySlot.lo_id == bindparam("lo"),
            QuerySlot.hi_id == bindparam("hi"),
            QuerySlot.anchor_id != bindparam("anchor"),
            lease_free(NOW),
            ~seen_by_rater(),
        )
        .order_by(QuerySlot.priority, QuerySlot.id)
        .limit(bindparam("most"))
    )
    return query.with_for_update(skip_locked=True) if postgres else query


_SIBLINGS = {False: _siblings(False), True: _siblings(True)}


def sort_size(session: Session, build_id: int | None) -> int:
    """How many of a node's items the build asks on one screen (1 outside builds)."""
    if build_id is None:
        return 1
    found = SORT_SIZE.run(session, {"build": build_id})
    return 1 if found is None else int(found.sort_size)


def lease_siblings(
    session: Session, slot, rater_id: int, most: int, now: datetime, expires: datetime
) -> list:
    """Lease up to `most` more slots of `slot`'s node for the rater: one per item (a query
    waiting for a majority has several slots), in queue order. On PostgreSQL the read
    skips and locks rows another rater is leasing; SQLite runs one writer at a time."""
    postgres = session.get_bind().dialect.name == "postgresql"
    rows = session.execute(
        _SIBLINGS[postgres],
        {
            "build": slot.build_id,
            "lo": slot.lo_id,
            "hi": slot.hi_id,
            "anchor": slot.anchor_id,
            "rater": rater_id,
            "now": now,
            "most": 4 * most,
        },
    ).all()
    chosen: list = []
    items: set[int] = set()
    for row in rows:
        if row.anchor_id not in items and len(chosen) < most:
            chosen.append(row)
            items.add(row.anchor_id)
    if chosen:
        session.execute(
            update(QuerySlot)
            .where(QuerySlot.id.in_([row.id for row in chosen]))
            .values(lease_rater_id=rater_id, lease_expires_at=expires)
            .execution_options(synchronize_session=False)
        )
    return chosen


def serve_siblings(
    session: Session, first_id: int, served: dict, siblings: Sequence, expires: datetime
) -> None:
    """The screen's other items as assignments naming its first (`served`: the first's
    values: project, rater, pivots, sides shown, serving time)."""
    if siblings:
        session.execute(
            insert(Assignment),
            [
                {
                    **served,
                    "slot_id": row.id,
                    "purpose": row.priority,
                    "anchor_id": row.anchor_id,
                    "expires_at": expires,
                    "format": SORT,
                    "screen_id": first_id,
                }
                for row in siblings
            ],
        )


def siblings_answered(session: Session, first_id: int, rater_id: int) -> Sequence[Row]:
    """The screen's other items' assignments: id, item and slot."""
    return session.execute(
        select(Assignment.id, Assignment.anchor_id, Assignment.slot_id).where(
            Assignment.screen_id == first_id, Assignment.rater_id == rater_id
        )
    ).all()


ANSWER_SIBLING = FastStatement(
    update(Assignment)
    .where(Assignment.id == bindparam("sibling"), Assignment.answered_at.is_(None))
    .values(
        answered_at=NOW,
        choice=bindparam("side", type_=Assignment.choice.type),
        response_time_ms=bindparam("elapsed"),
    )
)
