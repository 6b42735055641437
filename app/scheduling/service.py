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

Studies of screens (odd-one-out, rank: app/scheduling/screens.py) serve their random
questions and checks as screens, and a sampler's proposed triplet on a screen around it;
CompRF's queries stay triplets. An answered screen is stored as one judgement with the
triplets it implies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.core.errors import NotFound, ServiceError, Unprocessable
from app.core.fields import INT8_MAX
from app.models import (
    ADAPTIVE_PURPOSES,
    Assignment,
    Choice,
    JudgementFormat,
    LinkState,
    Project,
    Purpose,
    Rater,
)
from app.models._types import utcnow
from app.scheduling import screens, unseen
from app.scheduling.draws import Draws
from app.scheduling.screens import Screen
from app.scheduling.statements import (
    ANSWER,
    ANSWER_SLOT,
    COUNT_ANSWER,
    LEASE,
    RELEASE_SLOT,
    SCREEN_ANSWER,
    SCREEN_SERVED,
    SERVE,
    SERVE_SCREEN,
    SERVED_TO,
    STORE_DERIVED,
    STORE_JUDGEMENT,
    STORE_TRIPLET,
)
from app.scheduling.study_items import item_ids
from app.scheduling.thresholds import apply_thresholds, screens_out
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
    judgement: dict | None = None  # an answered screen's row, its triplets after it
    implied: list[dict] | None = None


@dataclass(frozen=True)
class ServedQuery:
    """A query served to a rater, as the pages show it: its assignment (the id raters
    send back as `query_id`) and the items in the places they are shown; a screen of
    another format has its `screen` instead (anchor, left and right are then 0)."""

    assignment_id: int
    anchor_id: int
    left_id: int
    right_id: int
    screen: Screen | None = None

    @classmethod
    def of(cls, assignment: Assignment) -> ServedQuery:
        if assignment.format is JudgementFormat.triplet:
            return cls(assignment.id, assignment.anchor_id, assignment.left_id, assignment.right_id)
        reference = assignment.anchor_id if assignment.format is JudgementFormat.rank else None
        screen = Screen(assignment.format, reference, tuple(assignment.shown), assignment.picks)
        return cls(assignment.id, 0, 0, 0, screen)


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
    slot = LEASE[postgres].run(
        session, {"project": project.id, "rater": rater.id, "now": now, "expires": expires}
    )
    return slot, expires


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
            return ServedQuery.of(held)
    draw = draws.kind
    slot = None
    expires = now + timedelta(seconds=lease_seconds(project, rater))
    ids = item_ids().get(session, project)

    def unseen_query(check: bool):
        if screens.is_screen_study(project):
            return unseen.screen(session, project, rater.id, ids, check, draws)
        return unseen.triplet(session, rater.id, ids, check, draws)

    if draw < project.attention_rate:
        purpose, chosen = Purpose.attention, unseen_query(True)
    elif draw < project.attention_rate + project.random_share:
        purpose, chosen = Purpose.random, unseen_query(False)
    else:
        if rater.answers or just_answered:  # joins that only look hold no build query
            slot, expires = _lease_slot(session, project, rater, now)
        if slot is not None:
            purpose, chosen = Purpose(slot.priority), (slot.anchor_id, slot.lo_id, slot.hi_id)
            if purpose is Purpose.proposal and screens.is_screen_study(project):
                # A sampler's question, asked on a screen of the study's format.
                chosen = (
                    unseen.screen_around(session, project, rater.id, ids, chosen, draws) or chosen
                )
        else:
            purpose, chosen = Purpose.random, unseen_query(False)
    # A rater who has seen every check still has random triplets to answer, and the
    # other way round; None only once both are used up (the session then ends).
    if chosen is None:
        purpose = Purpose.random if purpose is Purpose.attention else Purpose.attention
        chosen = unseen_query(purpose is Purpose.attention)
    if chosen is None:
        return None
    if isinstance(chosen, Screen):
        slot_id = None if slot is None else slot.id
        return _serve_screen(session, project, rater, chosen, purpose, now, expires, slot_id)
    anchor, lo, hi = chosen
    left_is_lo = draws.left_is_lo
    assignment_id = SERVE.run(
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


def _serve_screen(
    session: Session,
    project: Project,
    rater: ActiveRater,
    screen: Screen,
    purpose: Purpose,
    now: datetime,
    expires: datetime,
    slot_id: int | None = None,
) -> ServedQuery:
    anchor, lo, hi = screen.key
    served = SERVE_SCREEN.run(
        session,
        {
            "project": project.id,
            "rater": rater.id,
            "slot": slot_id,
            "purpose": int(purpose),
            "anchor": anchor,
            "lo": lo,
            "hi": hi,
            "now": now,
            "expires": expires,
            "format": screen.format,
            "shown": list(screen.shown),
            "picks": screen.picks,
        },
    )
    return ServedQuery(served.id, 0, 0, 0, screen)


MAX_RESPONSE_MS = 86_400_000


def response_time_allowed(response_time_ms: int | None) -> bool:
    return response_time_ms is None or 0 <= response_time_ms <= MAX_RESPONSE_MS


def submit_answer(
    *,
    session: Session,
    project: Project,
    rater: ActiveRater,
    assignment_id: int,
    choice: Choice | None = None,
    picks: list[str] | None = None,
    response_time_ms: int | None = None,
    now: datetime | None = None,
    keys_of: Callable[[list[int]], dict[int, str]],
) -> AnswerOutcome:
    """Record the rater's answer to one assignment, once: a `choice` for a triplet (or
    "can't tell" for any screen), the `picks` (item keys) for a screen, read against the
    shown items' keys that `keys_of` gives."""
    if choice is Choice.cant_tell and not project.allow_cant_tell:
        raise ServiceError('this project does not offer "can\'t tell": choose left or right')
    if not response_time_allowed(response_time_ms):
        raise ServiceError(
            f"response_time_ms must be between 0 and {MAX_RESPONSE_MS} (a day); "
            f"got {response_time_ms}"
        )
    now = now or utcnow()
    ids = {"assignment": assignment_id, "rater": rater.id, "now": now}
    if picks is not None:
        return _submit_screen(session, project, rater, ids, picks, response_time_ms, keys_of)
    answered = ANSWER.run(session, {**ids, "choice": choice, "elapsed": response_time_ms})
    if answered is None:
        served = SERVED_TO.run(session, ids)
        if served is None:
            raise NotFound(f"no query {assignment_id} was served to you")
        if served.format == JudgementFormat.triplet.value:
            return AnswerOutcome(replayed=True)
        if choice is not Choice.cant_tell:
            format = JudgementFormat(served.format)
            raise Unprocessable(screens.expected_answer(format, served.picks))
        return _submit_screen(session, project, rater, ids, None, response_time_ms, keys_of)

    chosen_lo = (choice is Choice.left) == answered.left_is_lo
    check = answered.purpose == Purpose.attention
    passed = (
        check
        and choice is not Choice.cant_tell
        and (answered.lo_id if chosen_lo else answered.hi_id) == answered.anchor_id
    )
    _count(session, project, rater, ids, check, passed)
    if check:
        return _after_check(session, project, rater, now)
    told = choice is not Choice.cant_tell
    slot_owner = _settle_slot(session, answered.slot_id, rater, told)
    if not told:
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


def _count(
    session: Session, project: Project, rater: ActiveRater, ids: dict, check: bool, passed: bool
) -> None:
    """Count the answer (and a check's result) on the rater."""
    counted = COUNT_ANSWER.run(
        session,
        {
            **ids,
            "passed": int(check and passed),
            "failed": int(check and not passed),
            "target": project.answers_per_rater,
        },
    )
    rater.answers = counted.answers


def _settle_slot(
    session: Session, slot_id: int | None, rater: ActiveRater, told: bool
) -> tuple[int | None, int | None]:
    """The queue slot an answer was for: answered, or given back where the rater could
    not tell or is excluded (someone else may tell, or be counted). Returns the build
    and routing it belongs to, when answered."""
    if slot_id is None:
        return None, None
    slot = {"slot": slot_id, "rater": rater.id}
    if not told or rater.excluded:
        RELEASE_SLOT.run(session, slot)
        return None, None
    return ANSWER_SLOT.run(session, slot)


def _after_check(
    session: Session, project: Project, rater: ActiveRater, now: datetime
) -> AnswerOutcome:
    # Checks are a few in a hundred answers: the thresholds work on the full rater.
    full = session.get(Rater, rater.id)
    changed = apply_thresholds(project=project, rater=full)
    screened = screens_out(project=project, rater=full)
    if screened:
        full.screened_out_at = now
    return AnswerOutcome(replayed=False, exclusion_changed=changed, screened_out=screened)


def _listed(value) -> list:
    """A JSON column as the driver gives it: parsed on PostgreSQL, text on SQLite."""
    return json.loads(value) if isinstance(value, str) else value


def _submit_screen(
    session: Session,
    project: Project,
    rater: ActiveRater,
    ids: dict,
    picks: list[str] | None,
    response_time_ms: int | None,
    keys_of: Callable[[list[int]], dict[int, str]],
) -> AnswerOutcome:
    """An answer to a screen: the keys picked (None: "can't tell"), checked against what
    the screen showed before anything is written."""
    served = SCREEN_SERVED.run(session, ids)
    if served is None:
        raise NotFound(f"no query {ids['assignment']} was served to you")
    format = JudgementFormat(served.format)
    if format is JudgementFormat.triplet:
        raise Unprocessable(screens.expected_answer(format, 0))
    shown = _listed(served.shown)
    picked = None
    if picks is not None:
        picked = screens.picked_ids(format, shown, served.picks, keys_of(shown), picks)
        if isinstance(picked, str):
            raise Unprocessable(picked)
    if served.answered_at is not None:
        return AnswerOutcome(replayed=True)
    claimed = SCREEN_ANSWER.run(
        session,
        {
            **ids,
            "choice": None if picked is not None else Choice.cant_tell,
            "chosen": picked,
            "elapsed": response_time_ms,
        },
    )
    if claimed is None:
        return AnswerOutcome(replayed=True)
    reference = served.anchor_id if format is JudgementFormat.rank else None
    check = served.purpose == Purpose.attention
    passed = check and picked is not None and screens.check_passed(format, reference, shown, picked)
    _count(session, project, rater, ids, check, passed)
    if check:
        return _after_check(session, project, rater, ids["now"])
    slot_owner = _settle_slot(session, served.slot_id, rater, picked is not None)
    if picked is None:
        return AnswerOutcome(replayed=False)
    implied = screens.implied_triplets(format, reference, shown, picked)
    common = {**ids, "project": project.id, "elapsed": response_time_ms}
    adaptive = served.purpose in ADAPTIVE_PURPOSES
    return AnswerOutcome(
        replayed=False,
        build_id=slot_owner[0],
        routing_id=slot_owner[1],
        judgement={
            **common,
            "format": format,
            "context": [] if reference is None else [reference],
            "shown": shown,
            "chosen": picked,
        },
        implied=[
            {**common, "anchor": anchor, "closer": closer, "farther": farther, "adaptive": adaptive}
            for anchor, closer, farther in implied.tolist()
        ],
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
        STORE_TRIPLET.run(session, outcome.triplet)
    if outcome.judgement is not None:
        hold_append_lock(session, outcome.judgement["project"])
        judgement_id = STORE_JUDGEMENT.run(session, outcome.judgement).id
        STORE_DERIVED.run_many(
            session, [{**row, "judgement": judgement_id} for row in outcome.implied]
        )
