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

Studies of screens (a format drawn at random: app/formats, app/scheduling/screens.py)
serve their random questions and checks as screens, and a sampler's proposed triplet on a screen around it.
A build that sorts asks up to `sort_size` of a node's items on one sorting screen
(app/scheduling/sorting.py); otherwise CompRF's queries are triplets. An answered
screen is stored as one judgement with the triplets it implies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session

from app.core.errors import NotFound, ServiceError, Unprocessable
from app.core.fields import INT8_MAX
from app.formats import SORT, Screen, named
from app.models import (
    ADAPTIVE_PURPOSES,
    Assignment,
    Choice,
    LinkState,
    Project,
    Purpose,
)
from app.models._types import utcnow
from app.scheduling import answers, screens, sorting, unseen
from app.scheduling import upcoming as ahead
from app.scheduling.answers import ActiveRater, AnswerOutcome
from app.scheduling.draws import Draws
from app.scheduling.statements import (
    ANSWER,
    LEASE,
    SERVE,
    SERVE_SCREEN,
    SERVED_TO,
    STORE_DERIVED,
    STORE_JUDGEMENT,
    STORE_TRIPLET,
)
from app.scheduling.study_items import item_ids
from app.scheduling.upcoming import Upcoming
from app.triplets.log import hold_append_lock

# Query ids are the assignments' BIGINT keys.
MAX_QUERY_ID = INT8_MAX


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
    upcoming: Upcoming | None = None  # the query after it, as far as it is drawn ahead

    @classmethod
    def of(cls, assignment: Assignment) -> ServedQuery:
        format = assignment.format
        ahead = Upcoming.of(assignment)
        if not format.served_as_screen:
            return cls(
                assignment.id,
                assignment.anchor_id,
                assignment.left_id,
                assignment.right_id,
                upcoming=ahead,
            )
        screen = format.served(
            assignment.anchor_id,
            assignment.left_id,
            assignment.right_id,
            assignment.shown or (),
            assignment.picks or 0,
        )
        return cls(assignment.id, 0, 0, 0, screen, ahead)


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
    """The query the rater holds and has not answered yet (a page reload shows it again;
    a sorting screen by its first item's assignment)."""
    now = now or utcnow()
    return session.scalar(
        select(Assignment)
        .where(
            Assignment.rater_id == rater.id,
            Assignment.answered_at.is_(None),
            Assignment.expires_at > now,
            Assignment.screen_id.is_(None),
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
    still has a code for that: cleared, the screened-out raters carry on), or on too few
    practice screens answered right (whatever the codes: they never reach the task)."""
    return (rater.screened_out and project.screened_out_code is not None) or rater.practice_failed


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
    upcoming: Upcoming | None = None,
) -> ServedQuery | None:
    """The next query for `rater`, leased to them; None once they are done or have been
    served every query the study has (`is_out_of_work`). The query they hold unanswered
    comes first, unless they `just_answered` it: then the next is the one decided as it
    was served (`upcoming`: app/scheduling/upcoming.py), where there is one. Random
    choices come from `draws`; the query after the one served is decided from its
    `ahead` and stored with it."""
    if is_screened_out(project, rater) or is_complete(project, rater.answers):
        return None
    if not is_asking(project):
        return None
    now = now or utcnow()
    if not just_answered:
        held = current_assignment(session=session, rater=rater, now=now)
        if held is not None:
            return ServedQuery.of(held)
        upcoming = None
    if upcoming is not None and not ahead.still_asked(project, upcoming.purpose):
        upcoming = None
    asked = upcoming.purpose if upcoming is not None else ahead.decide(project, draws)
    slot = None
    queue_free = None  # whether a lease found a slot, where one was tried
    expires = now + timedelta(seconds=lease_seconds(project, rater))
    ids = item_ids().get(session, project)

    def unseen_query(check: bool):
        drawn = ahead.still_unseen(session, project, rater.id, upcoming, check)
        if drawn is not None:
            return drawn
        if screens.screen_format(project) is not None:
            return unseen.screen(session, project, rater.id, ids, check, draws)
        return unseen.triplet(session, rater.id, ids, check, draws)

    def random_query(repeat: bool):
        """A random question, or a repeated one other raters had (the noise ceiling's:
        a triplet study's, unseen.repeats_now): (purpose, query)."""
        if repeat:
            repeated = unseen.repeated_triplet(session, project, rater.id, ids, now)
            if repeated is not None:
                return Purpose.repeat, repeated
        return Purpose.random, unseen_query(False)

    if asked == Purpose.attention:
        purpose, chosen = Purpose.attention, unseen_query(True)
    elif asked in (Purpose.random, Purpose.repeat):
        purpose, chosen = random_query(asked == Purpose.repeat)
    else:
        # Joins that only look hold no build query; nor does an arm with items of its own
        # (a build's queries are about every item).
        if (rater.answers or just_answered) and project.arm_items is None:
            slot, expires = _lease_slot(session, project, rater, now)
            queue_free = slot is not None
        size = 1 if slot is None else sorting.sort_size(session, slot.build_id)
        if size > 1:
            return _serve_sort(session, project, rater, slot, size, draws, now, expires)
        if slot is not None:
            purpose, chosen = Purpose(slot.priority), (slot.anchor_id, slot.lo_id, slot.hi_id)
            if purpose is Purpose.proposal and screens.screen_format(project) is not None:
                # A sampler's question, asked on a screen of the study's format.
                chosen = (
                    unseen.screen_around(session, project, rater.id, ids, chosen, draws) or chosen
                )
        else:
            purpose, chosen = random_query(False)
    # A rater who has seen every check still has random triplets to answer, and the
    # other way round; None only once both are used up (the session then ends).
    if chosen is None:
        purpose = Purpose.random if purpose is Purpose.attention else Purpose.attention
        chosen = unseen_query(purpose is Purpose.attention)
    if chosen is None:
        return None
    key = chosen.key if isinstance(chosen, Screen) else chosen
    following = ahead.draw(session, project, rater.id, ids, draws.ahead, key, queue_free, now)
    if isinstance(chosen, Screen):
        slot_id = None if slot is None else slot.id
        return _serve_screen(
            session, project, rater, chosen, purpose, now, expires, slot_id, following
        )
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
            **ahead.columns(following),
        },
    ).id
    left, right = (lo, hi) if left_is_lo else (hi, lo)
    return ServedQuery(assignment_id, anchor, left, right, upcoming=following)


def _serve_screen(
    session: Session,
    project: Project,
    rater: ActiveRater,
    screen: Screen,
    purpose: Purpose,
    now: datetime,
    expires: datetime,
    slot_id: int | None = None,
    following: Upcoming | None = None,
) -> ServedQuery:
    anchor, lo, hi = screen.key
    served = SERVE_SCREEN.run(
        session,
        {
            **ahead.columns(following),
            "project": project.id,
            "rater": rater.id,
            "slot": slot_id,
            "purpose": int(purpose),
            "anchor": anchor,
            "lo": lo,
            "hi": hi,
            "left_is_lo": True,
            "now": now,
            "expires": expires,
            "format": screen.format,
            "shown": list(screen.shown),
            "picks": screen.picks,
        },
    )
    return ServedQuery(served.id, 0, 0, 0, screen, following)


def _serve_sort(
    session: Session,
    project: Project,
    rater: ActiveRater,
    slot,
    size: int,
    draws: Draws,
    now: datetime,
    expires: datetime,
) -> ServedQuery:
    """A sorting screen: the leased slot's item and up to `size` - 1 more of its node."""
    siblings = sorting.lease_siblings(session, slot, rater.id, size - 1, now, expires)
    left_is_lo = draws.left_is_lo
    shown = (slot.anchor_id, *(row.anchor_id for row in siblings))
    served = {
        "project_id": project.id,
        "rater_id": rater.id,
        "lo_id": slot.lo_id,
        "hi_id": slot.hi_id,
        "left_is_lo": left_is_lo,
        "served_at": now,
    }
    first_id = SERVE_SCREEN.run(
        session,
        {
            "project": project.id,
            "rater": rater.id,
            "slot": slot.id,
            "purpose": slot.priority,
            "anchor": slot.anchor_id,
            "lo": slot.lo_id,
            "hi": slot.hi_id,
            "left_is_lo": left_is_lo,
            "now": now,
            "expires": expires,
            "format": SORT,
            "shown": list(shown),
            "picks": None,
            **ahead.NOTHING_AHEAD,
        },
    ).id
    sorting.serve_siblings(session, first_id, served, siblings, expires)
    pivots = (slot.lo_id, slot.hi_id) if left_is_lo else (slot.hi_id, slot.lo_id)
    return ServedQuery(first_id, 0, 0, 0, Screen(SORT, None, shown, 0, pivots))


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
    sides: list[tuple[str, str]] | None = None,
    response_time_ms: int | None = None,
    now: datetime | None = None,
    keys_of: Callable[[list[int]], dict[int, str]],
) -> AnswerOutcome:
    """Record the rater's answer to one assignment, once: a `choice` for a triplet (or
    "can't tell" for any screen), the `picks` (item keys) for an odd-one-out or rank
    screen, the `sides` (item key, side) for a sorting screen, read against the shown
    items' keys that `keys_of` gives."""
    if choice is Choice.cant_tell and not project.allow_cant_tell:
        raise ServiceError('this project does not offer "can\'t tell": choose left or right')
    if not response_time_allowed(response_time_ms):
        raise ServiceError(
            f"response_time_ms must be between 0 and {MAX_RESPONSE_MS} (a day); "
            f"got {response_time_ms}"
        )
    now = now or utcnow()
    ids = {
        "assignment": assignment_id,
        "rater": rater.id,
        "now": now,
        "arm": rater.arm,
        "version": project.design_version,
    }
    if sides is not None:
        return answers.submit_sort(session, project, rater, ids, sides, response_time_ms, keys_of)
    if picks is not None:
        return answers.submit_screen(session, project, rater, ids, picks, response_time_ms, keys_of)
    answered = ANSWER.run(session, {**ids, "choice": choice, "elapsed": response_time_ms})
    if answered is None:
        served = SERVED_TO.run(session, ids)
        if served is None:
            raise NotFound(f"no query {assignment_id} was served to you")
        format = named(served.format)
        if format.answered_with == "choice":
            return AnswerOutcome(replayed=True)
        if choice is not Choice.cant_tell:
            raise Unprocessable(format.expected_answer(served.picks, project.allow_cant_tell))
        submit = answers.submit_sort if format.answered_with == "sides" else answers.submit_screen
        return submit(session, project, rater, ids, None, response_time_ms, keys_of)

    chosen_lo = (choice is Choice.left) == answered.left_is_lo
    check = answered.purpose == Purpose.attention
    passed = (
        check
        and choice is not Choice.cant_tell
        and (answered.lo_id if chosen_lo else answered.hi_id) == answered.anchor_id
    )
    following = Upcoming.of(answered)
    answers.count_answer(session, project, rater, ids, check, passed)
    if check:
        return answers.after_check(session, project, rater, now, following)
    told = choice is not Choice.cant_tell
    slot_owner = answers.settle_slot(session, answered.slot_id, rater, told)
    if not told:
        return AnswerOutcome(replayed=False, upcoming=following)
    closer, farther = (
        (answered.lo_id, answered.hi_id) if chosen_lo else (answered.hi_id, answered.lo_id)
    )
    return AnswerOutcome(
        replayed=False,
        upcoming=following,
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
    """Take back a query served but not answered (it names an item deleted since), with
    the rest of its sorting screen."""
    session.execute(
        delete(Assignment).where(
            or_(Assignment.id == assignment_id, Assignment.screen_id == assignment_id),
            Assignment.answered_at.is_(None),
        )
    )


def store_answer(*, session: Session, outcome: AnswerOutcome) -> None:
    """Append the answer's triplet: the last write of the request's transaction, so the
    triplets log's lock (see app/triplets/log.py) is held only until the commit."""
    if outcome.triplet is not None:
        hold_append_lock(session, outcome.triplet["project"])
        STORE_TRIPLET.run(session, outcome.triplet)
    if outcome.judgement is not None:
        hold_append_lock(session, outcome.judgement["project"])
        judged = outcome.judgement
        screen = named(judged["format"]).screen_of(judged["context"], judged["shown"])
        judgement_id = STORE_JUDGEMENT.run(session, {**judged, "screen": screen}).id
        STORE_DERIVED.run_many(
            session, [{**row, "judgement": judgement_id} for row in outcome.implied or ()]
        )
