"""The statements of the answer's hot path, built and compiled once per dialect and run
on the driver's cursor (see FastStatement): an answer is one request of eight of them.
closer_answer() (closer_answer.sql) runs the same steps in PostgreSQL."""

from __future__ import annotations

from sqlalchemy import bindparam, case, exists, insert, literal_column, or_, select, update

from app.core.db import FastStatement
from app.formats import TRIPLET
from app.models import (
    Assignment,
    Judgement,
    Project,
    QuerySlot,
    Rater,
    SlotState,
    Triplet,
    TripletSource,
)
from app.models._types import Timestamp

# The open-slot indexes are partial (WHERE state = 'open'); PostgreSQL uses them only for
# a query that says so literally, not through a bound parameter.
IS_OPEN = QuerySlot.state == literal_column("'open'")


def lease_free(now):
    """Open slots no rater holds: never leased, or the lease ran out."""
    return or_(QuerySlot.lease_expires_at.is_(None), QuerySlot.lease_expires_at < now)


def seen_by_rater():
    """The rater (bound as "rater") was served the slot's query before: a rater is never
    served a query twice."""
    return exists().where(
        Assignment.rater_id == bindparam("rater"),
        Assignment.anchor_id == QuerySlot.anchor_id,
        Assignment.lo_id == QuerySlot.lo_id,
        Assignment.hi_id == QuerySlot.hi_id,
    )


# The statements of the answer's hot path, built and compiled once and run on the
# driver's cursor (see FastStatement): an answer is one request of eight statements.
NOW = bindparam("now", type_=Timestamp)
# The rater's next query as decided when this one was served (app/scheduling/upcoming.py).
UPCOMING = (
    Assignment.upcoming_purpose,
    Assignment.upcoming_anchor_id,
    Assignment.upcoming_lo_id,
    Assignment.upcoming_hi_id,
    Assignment.upcoming_screen,
)
ANSWER = FastStatement(
    update(Assignment)
    .where(
        Assignment.id == bindparam("assignment"),
        Assignment.rater_id == bindparam("rater"),
        Assignment.answered_at.is_(None),
        Assignment.format == literal_column(f"'{TRIPLET.name}'"),
    )
    .values(
        answered_at=NOW,
        choice=bindparam("choice"),
        response_time_ms=bindparam("elapsed"),
    )
    .returning(
        Assignment.slot_id,
        Assignment.purpose,
        Assignment.anchor_id,
        Assignment.lo_id,
        Assignment.hi_id,
        Assignment.left_is_lo,
        *UPCOMING,
    )
)
SERVED_TO = FastStatement(
    select(Assignment.id, Assignment.format, Assignment.picks).where(
        Assignment.id == bindparam("assignment"), Assignment.rater_id == bindparam("rater")
    )
)
COUNT_ANSWER = FastStatement(
    update(Rater)
    .where(Rater.id == bindparam("rater"))
    .values(
        answers=Rater.answers + 1,
        attention_passed=Rater.attention_passed + bindparam("passed"),
        attention_failed=Rater.attention_failed + bindparam("failed"),
        last_seen_at=NOW,
        completed_at=case(
            (
                (bindparam("target") > 0)
                & (Rater.answers + 1 >= bindparam("target"))
                & Rater.completed_at.is_(None),
                NOW,
            ),
            else_=Rater.completed_at,
        ),
    )
    .returning(Rater.answers)
)
# The study's first answer under its design version locks it (app/projects/versions.py).
LOCK_DESIGN = FastStatement(
    update(Project)
    .where(Project.id == bindparam("project"), Project.design_locked_at.is_(None))
    .values(design_locked_at=NOW)
)
RELEASE_SLOT = FastStatement(
    update(QuerySlot)
    .where(QuerySlot.id == bindparam("slot"), QuerySlot.lease_rater_id == bindparam("rater"))
    .values(lease_rater_id=None, lease_expires_at=None)
)
# A late answer to an expired lease that was served again may find its slot answered:
# the answer still counts, the slot stays as it is.
ANSWER_SLOT = FastStatement(
    update(QuerySlot)
    .where(QuerySlot.id == bindparam("slot"))
    .values(
        state=case(
            (QuerySlot.state == SlotState.open, SlotState.answered.value),
            else_=QuerySlot.state,
        )
    )
    .returning(QuerySlot.build_id, QuerySlot.routing_id)
)
# A rater's triplet: the answer to a triplet, or one of those a screen implies.
_ANSWERED_TRIPLET = {
    "project_id": bindparam("project"),
    "anchor_id": bindparam("anchor"),
    "closer_id": bindparam("closer"),
    "farther_id": bindparam("farther"),
    "source": TripletSource.rater,
    "rater_id": bindparam("rater"),
    "query_id": bindparam("assignment"),
    "response_time_ms": bindparam("elapsed"),
    "created_at": NOW,
    "adaptive": bindparam("adaptive"),
    "arm": bindparam("arm"),
    "design_version": bindparam("version"),
}
STORE_TRIPLET = FastStatement(insert(Triplet).values(**_ANSWERED_TRIPLET))
# A query served: a triplet, or a screen (SERVE_SCREEN) with what it shows.
_SERVED = {
    "project_id": bindparam("project"),
    "rater_id": bindparam("rater"),
    "slot_id": bindparam("slot"),
    "purpose": bindparam("purpose"),
    "anchor_id": bindparam("anchor"),
    "lo_id": bindparam("lo"),
    "hi_id": bindparam("hi"),
    "left_is_lo": bindparam("left_is_lo"),
    "served_at": NOW,
    "expires_at": bindparam("expires", type_=Timestamp),
    "upcoming_purpose": bindparam("upcoming_purpose"),
    "upcoming_anchor_id": bindparam("upcoming_anchor"),
    "upcoming_lo_id": bindparam("upcoming_lo"),
    "upcoming_hi_id": bindparam("upcoming_hi"),
    "upcoming_screen": bindparam("upcoming_screen", type_=Assignment.upcoming_screen.type),
}
SERVE = FastStatement(
    insert(Assignment)
    .values(**_SERVED, format=literal_column(f"'{TRIPLET.name}'"))
    .returning(Assignment.id)
)


def _lease_statement(postgres: bool):
    """Lease the first free slot the rater has not seen, in one statement. On PostgreSQL
    the inner read skips rows another transaction holds; SQLite runs one writer at a
    time."""
    first = (
        select(QuerySlot.id)
        .where(
            QuerySlot.project_id == bindparam("project"),
            IS_OPEN,
            lease_free(NOW),
            ~seen_by_rater(),
        )
        .order_by(QuerySlot.priority, QuerySlot.id)
        .limit(1)
    )
    if postgres:
        first = first.with_for_update(skip_locked=True)
    return (
        update(QuerySlot)
        .where(QuerySlot.id == first.scalar_subquery())
        .values(
            lease_rater_id=bindparam("rater"),
            lease_expires_at=bindparam("expires", type_=Timestamp),
        )
        .returning(
            QuerySlot.id,
            QuerySlot.anchor_id,
            QuerySlot.lo_id,
            QuerySlot.hi_id,
            QuerySlot.priority,
            QuerySlot.build_id,
        )
    )


# Whether a study's queue has an open slot (its queue's turn then leases one).
OPEN_SLOT = FastStatement(
    select(QuerySlot.id).where(QuerySlot.project_id == bindparam("project"), IS_OPEN).limit(1)
)
LEASE = {
    False: FastStatement(_lease_statement(False)),
    True: FastStatement(_lease_statement(True)),
}


# A screen's answer (app/scheduling/screens.py): what it showed, then its answer claimed
# once, its judgement and the triplets it implies.
SCREEN_SERVED = FastStatement(
    select(
        Assignment.slot_id,
        Assignment.format,
        Assignment.shown,
        Assignment.picks,
        Assignment.purpose,
        Assignment.anchor_id,
        Assignment.lo_id,
        Assignment.hi_id,
        Assignment.left_is_lo,
        Assignment.answered_at,
        Assignment.screen_id,
        *UPCOMING,
    ).where(Assignment.id == bindparam("assignment"), Assignment.rater_id == bindparam("rater"))
)
SCREEN_ANSWER = FastStatement(
    update(Assignment)
    .where(Assignment.id == bindparam("assignment"), Assignment.answered_at.is_(None))
    .values(
        answered_at=NOW,
        choice=bindparam("choice"),
        chosen=bindparam("chosen", type_=Assignment.chosen.type),
        response_time_ms=bindparam("elapsed"),
    )
    .returning(Assignment.id)
)
SEEN = FastStatement(
    select(Assignment.id)
    .where(
        Assignment.rater_id == bindparam("rater"),
        Assignment.anchor_id == bindparam("anchor"),
        Assignment.lo_id == bindparam("lo"),
        Assignment.hi_id == bindparam("hi"),
    )
    .limit(1)
)
SERVE_SCREEN = FastStatement(
    insert(Assignment)
    .values(
        **_SERVED,
        format=bindparam("format", type_=Assignment.format.type),
        shown=bindparam("shown", type_=Assignment.shown.type),
        picks=bindparam("picks"),
    )
    .returning(Assignment.id)
)
STORE_JUDGEMENT = FastStatement(
    insert(Judgement)
    .values(
        project_id=bindparam("project"),
        format=bindparam("format", type_=Judgement.format.type),
        context=bindparam("context", type_=Judgement.context.type),
        shown=bindparam("shown", type_=Judgement.shown.type),
        chosen=bindparam("chosen", type_=Judgement.chosen.type),
        rater_id=bindparam("rater"),
        response_time_ms=bindparam("elapsed"),
        created_at=NOW,
        arm=bindparam("arm"),
        design_version=bindparam("version"),
        screen=bindparam("screen"),
    )
    .returning(Judgement.id)
)
STORE_DERIVED = FastStatement(
    insert(Triplet).values(**_ANSWERED_TRIPLET, judgement_id=bindparam("judgement"))
)
