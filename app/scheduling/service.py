"""The scheduler: which query a rater sees next, and what their answer changes.

Choosing: with the project's attention-check rate the rater gets a check (the anchor is
one of the candidates), with its random share a random triplet for the passive
learners, and otherwise the first free slot of the queue in priority order (routing
queries, open CompRF nodes, further answers for a majority); a random triplet when the
queue has nothing for them. A slot is leased with a compare-and-set update, after a
`FOR UPDATE SKIP LOCKED` read on PostgreSQL, so two raters never hold the same slot, on
any number of web processes. A rater never gets a query they were served before.

Answering: the assignment's id is the idempotency key. The first answer marks the
assignment answered and writes one triplet; a retry, a double click or a replay finds it
answered and writes nothing. An answer whose lease expired still counts if it is the
assignment's first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import bindparam, case, delete, exists, insert, literal_column, or_, select, update
from sqlalchemy.orm import Session

from app.core.db import FastStatement
from app.core.errors import NotFound, ServiceError
from app.core.fields import INT8_MAX
from app.models import (
    ADAPTIVE_PURPOSES,
    Assignment,
    Choice,
    LinkState,
    Project,
    Purpose,
    QuerySlot,
    Rater,
    SlotState,
    Triplet,
    TripletSource,
)
from app.models._types import Timestamp, utcnow
from app.scheduling.draws import Draws
from app.scheduling.study_items import item_ids
from app.triplets.log import hold_append_lock

# Query ids are the assignments' BIGINT keys.
MAX_QUERY_ID = INT8_MAX


@dataclass
class ActiveRater:
    """The rater behind a request, as the rating path needs them: read with a plain
    query (no ORM object), their answer count kept current by the answer it records."""

    id: int
    answers: int
    excluded: bool
    screened_out: bool = False  # ended on failed attention checks: nothing more is asked

    @classmethod
    def of(cls, rater: Rater) -> ActiveRater:
        return cls(rater.id, rater.answers, rater.excluded, rater.screened_out_at is not None)


@dataclass(frozen=True)
class AnswerOutcome:
    """What an answer did: whether it was new, and what it asks of the builds."""

    replayed: bool
    build_id: int | None = None
    routing_id: int | None = None
    exclusion_changed: bool = False
    screened_out: bool = False  # this check ended the rater's session (screened_out_code)
    triplet: dict | None = None  # the row to append with store_answer, last


# The open-slot indexes are partial (WHERE state = 'open'); PostgreSQL uses them only for
# a query that says so literally, not through a bound parameter.
IS_OPEN = QuerySlot.state == literal_column("'open'")


def lease_free(now):
    """Open slots no rater holds: never leased, or the lease ran out."""
    return or_(QuerySlot.lease_expires_at.is_(None), QuerySlot.lease_expires_at < now)


# The statements of the answer's hot path, built and compiled once and run on the
# driver's cursor (see FastStatement): an answer is one request of eight statements.
NOW = bindparam("now", type_=Timestamp)
_ANSWER = FastStatement(
    update(Assignment)
    .where(
        Assignment.id == bindparam("assignment"),
        Assignment.rater_id == bindparam("rater"),
        Assignment.answered_at.is_(None),
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
    )
)
_SERVED_TO = FastStatement(
    select(Assignment.id).where(
        Assignment.id == bindparam("assignment"), Assignment.rater_id == bindparam("rater")
    )
)
_COUNT_ANSWER = FastStatement(
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
_RELEASE_SLOT = FastStatement(
    update(QuerySlot)
    .where(QuerySlot.id == bindparam("slot"), QuerySlot.lease_rater_id == bindparam("rater"))
    .values(lease_rater_id=None, lease_expires_at=None)
)
# A late answer to an expired lease that was served again may find its slot answered:
# the answer still counts, the slot stays as it is.
_ANSWER_SLOT = FastStatement(
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
_STORE_TRIPLET = FastStatement(
    insert(Triplet).values(
        project_id=bindparam("project"),
        anchor_id=bindparam("anchor"),
        closer_id=bindparam("closer"),
        farther_id=bindparam("farther"),
        source=TripletSource.rater,
        rater_id=bindparam("rater"),
        query_id=bindparam("assignment"),
        response_time_ms=bindparam("elapsed"),
        created_at=NOW,
        adaptive=bindparam("adaptive"),
    )
)
_SERVE = FastStatement(
    insert(Assignment)
    .values(
        project_id=bindparam("project"),
        rater_id=bindparam("rater"),
        slot_id=bindparam("slot"),
        purpose=bindparam("purpose"),
        anchor_id=bindparam("anchor"),
        lo_id=bindparam("lo"),
        hi_id=bindparam("hi"),
        left_is_lo=bindparam("left_is_lo"),
        served_at=NOW,
        expires_at=bindparam("expires", type_=Timestamp),
    )
    .returning(Assignment.id)
)


def _lease_statement(postgres: bool):
    """Lease the first free slot the rater has not seen, in one statement. On PostgreSQL
    the inner read skips rows another transaction holds; SQLite runs one writer at a
    time."""
    seen = exists().where(
        Assignment.rater_id == bindparam("rater"),
        Assignment.anchor_id == QuerySlot.anchor_id,
        Assignment.lo_id == QuerySlot.lo_id,
        Assignment.hi_id == QuerySlot.hi_id,
    )
    first = (
        select(QuerySlot.id)
        .where(
            QuerySlot.project_id == bindparam("project"),
            IS_OPEN,
            lease_free(NOW),
            ~seen,
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
            QuerySlot.id, QuerySlot.anchor_id, QuerySlot.lo_id, QuerySlot.hi_id, QuerySlot.priority
        )
    )


_LEASE = {
    False: FastStatement(_lease_statement(False)),
    True: FastStatement(_lease_statement(True)),
}


@dataclass(frozen=True)
class ServedQuery:
    """A query served to a rater, as the pages show it: its assignment (the id raters
    send back as `query_id`) and the items in the places they are shown."""

    assignment_id: int
    anchor_id: int
    left_id: int
    right_id: int


def _seen_by(rater_id: int):
    """The rater was served this slot's query before."""
    return exists().where(
        Assignment.rater_id == rater_id,
        Assignment.anchor_id == QuerySlot.anchor_id,
        Assignment.lo_id == QuerySlot.lo_id,
        Assignment.hi_id == QuerySlot.hi_id,
    )


# A rater who has answered nothing yet holds their (random) query this long at most.
FIRST_LEASE_SECONDS = 30


def lease_seconds(project: Project, rater: ActiveRater) -> int:
    """How long the rater holds what they are served: the study's lease once they have
    answered, a short one before, and no build slot before (closer_answer() serves only
    after an answer)."""
    if rater.answers:
        return project.lease_seconds
    return min(project.lease_seconds, FIRST_LEASE_SECONDS)


def _lease_slot(session: Session, project: Project, rater: ActiveRater, now: datetime):
    """Lease the first free queue slot this rater has not seen; None when there is none."""
    expires = now + timedelta(seconds=lease_seconds(project, rater))
    postgres = session.get_bind().dialect.name == "postgresql"
    slot = _LEASE[postgres].run(
        session, {"project": project.id, "rater": rater.id, "now": now, "expires": expires}
    )
    return slot, expires


def _draw_unseen(
    session: Session, rater: ActiveRater, ids: np.ndarray, attention: bool, draws: Draws
):
    """A random query (or attention check) the rater has not been served: the first of
    the drawn candidates, as closer_answer() takes it, else one found by a full search;
    None once the rater has seen every one the study has."""
    if len(ids) < 3:
        return None
    for anchor, p, q in draws.candidates(ids):
        first = anchor if attention else p
        lo, hi = min(first, q), max(first, q)
        seen = session.scalar(
            select(Assignment.id).where(
                Assignment.rater_id == rater.id,
                Assignment.anchor_id == anchor,
                Assignment.lo_id == lo,
                Assignment.hi_id == hi,
            )
        )
        if seen is None:
            return anchor, lo, hi
    return _any_unseen(session, rater, ids, attention, draws.search_rng())


# Studies with at most this many distinct queries (about 75 items) are searched whole once
# random draws keep hitting queries the rater has seen; larger ones are drawn from again.
MOST_ENUMERATED = 200_000
MORE_DRAWS = 2_000


def _any_unseen(session: Session, rater: ActiveRater, ids: np.ndarray, attention: bool, rng):
    """A query (or check) the rater was never served, found against everything they were
    served; None only once they have seen every one the study has."""
    seen = {
        tuple(row)
        for row in session.execute(
            select(Assignment.anchor_id, Assignment.lo_id, Assignment.hi_id).where(
                Assignment.rater_id == rater.id
            )
        )
    }
    n = len(ids)
    total = n * (n - 1) if attention else n * (n - 1) * (n - 2) // 2
    if total > MOST_ENUMERATED:
        for _ in range(MORE_DRAWS):
            anchor, p, q = rng.sample(range(n), 3)
            first = ids[anchor] if attention else ids[p]
            lo, hi = sorted((int(first), int(ids[q])))
            if (int(ids[anchor]), lo, hi) not in seen:
                return int(ids[anchor]), lo, hi
        return None
    unseen = [query for query in _every_query(ids, attention) if query not in seen]
    return rng.choice(unseen) if unseen else None


def _every_query(ids: np.ndarray, attention: bool):
    ordered = sorted(int(i) for i in ids)
    for anchor in ordered:
        others = [i for i in ordered if i != anchor]
        if attention:
            yield from ((anchor, min(anchor, o), max(anchor, o)) for o in others)
        else:
            yield from ((anchor, lo, hi) for at, lo in enumerate(others) for hi in others[at + 1 :])


def current_assignment(*, session: Session, rater: ActiveRater, now: datetime | None = None):
    """The query the rater holds and has not answered yet (a page reload shows it again)."""
    now = now or utcnow()
    return session.scalar(
        select(Assignment)
        .where(
            Assignment.rater_id == rater.id,
            Assignment.answered_at.is_(None),
            Assignment.expires_at > now,
        )
        .order_by(Assignment.id.desc())
        .limit(1)
    )


def is_complete(project: Project, answers: int) -> bool:
    """Whether a rater with this many answers has completed their session."""
    return project.answers_per_rater > 0 and answers >= project.answers_per_rater


def is_asking(project: Project) -> bool:
    """Whether the link is open: else nothing new is served, and no code is given."""
    return project.link_state is LinkState.open


def is_screened_out(project: Project, rater: ActiveRater) -> bool:
    """Whether the rater's session ended on failed attention checks (while the project
    still has a code for that: cleared, the screened-out raters carry on)."""
    return rater.screened_out and project.screened_out_code is not None


def is_out_of_work(project: Project, answers: int, served: object | None) -> bool:
    """Whether a session ends early: nothing served, not complete, the link open."""
    return served is None and is_asking(project) and not is_complete(project, answers)


def serve_next(
    *,
    session: Session,
    project: Project,
    rater: ActiveRater,
    draws: Draws,
    now: datetime | None = None,
    just_answered: bool = False,
) -> ServedQuery | None:
    """The next query for `rater`, leased to them; None once they are done or have been
    served every query the study has (`is_out_of_work`). The query they hold unanswered
    comes first, unless they `just_answered` it. Random choices come from `draws`."""
    if is_screened_out(project, rater) or is_complete(project, rater.answers):
        return None
    if not is_asking(project):
        return None
    now = now or utcnow()
    if not just_answered:
        held = current_assignment(session=session, rater=rater, now=now)
        if held is not None:
            return ServedQuery(held.id, held.anchor_id, held.left_id, held.right_id)
    draw = draws.kind
    slot = None
    expires = now + timedelta(seconds=lease_seconds(project, rater))
    ids = item_ids().get(session, project)
    if draw < project.attention_rate:
        purpose, chosen = Purpose.attention, _draw_unseen(session, rater, ids, True, draws)
    elif draw < project.attention_rate + project.random_share:
        purpose, chosen = Purpose.random, _draw_unseen(session, rater, ids, False, draws)
    else:
        if rater.answers or just_answered:  # joins that only look hold no build query
            slot, expires = _lease_slot(session, project, rater, now)
        if slot is not None:
            purpose, chosen = Purpose(slot.priority), (slot.anchor_id, slot.lo_id, slot.hi_id)
        else:
            purpose, chosen = Purpose.random, _draw_unseen(session, rater, ids, False, draws)
    # A rater who has seen every check still has random triplets to answer, and the
    # other way round; None only once both are used up (the session then ends).
    if chosen is None:
        purpose = Purpose.random if purpose is Purpose.attention else Purpose.attention
        chosen = _draw_unseen(session, rater, ids, purpose is Purpose.attention, draws)
    if chosen is None:
        return None
    anchor, lo, hi = chosen
    left_is_lo = draws.left_is_lo
    assignment_id = _SERVE.run(
        session,
        {
            "project": project.id,
            "rater": rater.id,
            "slot": None if slot is None else slot.id,
            "purpose": int(purpose),
            "anchor": anchor,
            "lo": lo,
            "hi": hi,
            "left_is_lo": left_is_lo,
            "now": now,
            "expires": expires,
        },
    ).id
    left, right = (lo, hi) if left_is_lo else (hi, lo)
    return ServedQuery(assignment_id, anchor, left, right)


MAX_RESPONSE_MS = 86_400_000


def response_time_allowed(response_time_ms: int | None) -> bool:
    return response_time_ms is None or 0 <= response_time_ms <= MAX_RESPONSE_MS


def submit_answer(
    *,
    session: Session,
    project: Project,
    rater: ActiveRater,
    assignment_id: int,
    choice: Choice,
    response_time_ms: int | None = None,
    now: datetime | None = None,
) -> AnswerOutcome:
    """Record the rater's answer to one assignment, once."""
    if choice is Choice.cant_tell and not project.allow_cant_tell:
        raise ServiceError('this project does not offer "can\'t tell": choose left or right')
    if not response_time_allowed(response_time_ms):
        raise ServiceError(
            f"response_time_ms must be between 0 and {MAX_RESPONSE_MS} (a day); "
            f"got {response_time_ms}"
        )
    now = now or utcnow()
    ids = {"assignment": assignment_id, "rater": rater.id, "now": now}
    answered = _ANSWER.run(session, {**ids, "choice": choice, "elapsed": response_time_ms})
    if answered is None:
        if _SERVED_TO.run(session, ids) is None:
            raise NotFound(f"no query {assignment_id} was served to you")
        return AnswerOutcome(replayed=True)

    chosen_lo = (choice is Choice.left) == answered.left_is_lo
    check = answered.purpose == Purpose.attention
    passed = (
        check
        and choice is not Choice.cant_tell
        and (answered.lo_id if chosen_lo else answered.hi_id) == answered.anchor_id
    )
    counted = _COUNT_ANSWER.run(
        session,
        {
            **ids,
            "passed": int(check and passed),
            "failed": int(check and not passed),
            "target": project.answers_per_rater,
        },
    )
    rater.answers = counted.answers
    if check:
        # Checks are a few in a hundred answers: the thresholds work on the full rater.
        full = session.get(Rater, rater.id)
        changed = apply_thresholds(project=project, rater=full)
        screened = screens_out(project=project, rater=full)
        if screened:
            full.screened_out_at = now
        return AnswerOutcome(replayed=False, exclusion_changed=changed, screened_out=screened)

    slot_owner = (None, None)
    if answered.slot_id is not None:
        slot = {"slot": answered.slot_id, "rater": rater.id}
        if choice is Choice.cant_tell or rater.excluded:
            # Someone else may be able to tell (or is counted): the slot goes back.
            _RELEASE_SLOT.run(session, slot)
        else:
            slot_owner = _ANSWER_SLOT.run(session, slot)
    if choice is Choice.cant_tell:
        return AnswerOutcome(replayed=False)
    closer, farther = (
        (answered.lo_id, answered.hi_id) if chosen_lo else (answered.hi_id, answered.lo_id)
    )
    return AnswerOutcome(
        replayed=False,
        build_id=slot_owner[0],
        routing_id=slot_owner[1],
        triplet={
            **ids,
            "project": project.id,
            "anchor": answered.anchor_id,
            "closer": closer,
            "farther": farther,
            "elapsed": response_time_ms,
            "adaptive": answered.purpose in ADAPTIVE_PURPOSES,
        },
    )


def withdraw(*, session: Session, assignment_id: int) -> None:
    """Take back a query served but not answered (it names an item deleted since)."""
    session.execute(
        delete(Assignment).where(Assignment.id == assignment_id, Assignment.answered_at.is_(None))
    )


def store_answer(*, session: Session, outcome: AnswerOutcome) -> None:
    """Append the answer's triplet: the last write of the request's transaction, so the
    triplets log's lock (see app/triplets/log.py) is held only until the commit."""
    if outcome.triplet is not None:
        hold_append_lock(session, outcome.triplet["project"])
        _STORE_TRIPLET.run(session, outcome.triplet)


def failed_attention(*, project: Project, rater: Rater) -> str | None:
    """How the rater fell below the project's attention-check threshold, or None."""
    checks = rater.attention_passed + rater.attention_failed
    if (
        project.min_attention_accuracy is not None
        and checks >= project.quality_min_answers
        and rater.attention_passed / checks < project.min_attention_accuracy
    ):
        return (
            f"passed {rater.attention_passed} of {checks} attention checks "
            f"(below {project.min_attention_accuracy:.0%})"
        )
    return None


def screens_out(*, project: Project, rater: Rater) -> bool:
    """Whether the rater's session ends now on failed attention checks: the project has a
    code for that, they fell below its threshold, and the researcher has not included
    them whatever the thresholds say."""
    return (
        project.screened_out_code is not None
        and rater.screened_out_at is None
        and rater.exclusion_override is not False
        and failed_attention(project=project, rater=rater) is not None
    )


def apply_thresholds(*, project: Project, rater: Rater) -> bool:
    """Decide the rater's exclusion from the project's thresholds (unless the researcher
    decided it); returns whether the decision in force changed."""
    before = rater.excluded
    reasons = []
    attention = failed_attention(project=project, rater=rater)
    if attention is not None:
        reasons.append(attention)
    if (
        project.min_majority_agreement is not None
        and rater.majority_agreement is not None
        and rater.majority_compared >= project.quality_min_answers
        and rater.majority_agreement < project.min_majority_agreement
    ):
        reasons.append(
            f"agreed with the majority on {rater.majority_agreement:.0%} of "
            f"{rater.majority_compared} queries (below {project.min_majority_agreement:.0%})"
        )
    if rater.exclusion_override is not None:
        rater.excluded = rater.exclusion_override
        rater.exclusion_reason = "set by the researcher"
    else:
        rater.excluded = bool(reasons)
        rater.exclusion_reason = "; ".join(reasons)
    return rater.excluded != before


def excluded_rater_ids(session: Session, project_id: int) -> list[int]:
    return list(
        session.scalars(
            select(Rater.id).where(Rater.project_id == project_id, Rater.excluded.is_(True))
        )
    )
