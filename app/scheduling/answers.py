"""What an answer does once it is the assignment's first: counted on the rater, a check's
result applied to their exclusion, its queue slot settled; and a screen's answer (odd-one-
out, rank, sorting) read against what the screen showed into one judgement and the
triplets it implies. The scheduler's `submit_answer` (app/scheduling/service.py) takes
the request and hands a screen's answer here."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.core.errors import NotFound, Unprocessable
from app.formats import SORT, PickedScreen, named
from app.models import ADAPTIVE_PURPOSES, Choice, Project, Purpose, Rater
from app.scheduling import sorting
from app.scheduling.statements import (
    ANSWER_SLOT,
    COUNT_ANSWER,
    LOCK_DESIGN,
    RELEASE_SLOT,
    SCREEN_ANSWER,
    SCREEN_SERVED,
)
from app.scheduling.thresholds import apply_thresholds, screens_out
from app.scheduling.upcoming import Upcoming


@dataclass
class ActiveRater:
    """The rater behind a request, as the rating path needs them: read with a plain
    query (no ORM object), their answer count kept current by the answer it records."""

    id: int
    answers: int
    excluded: bool
    screened_out: bool = False  # ended on failed attention checks: nothing more is asked
    consented: bool = False  # agreed to the study's consent (where it asks one)
    declined: bool = False  # declined it: the session ended there
    questionnaire_sent: bool = False  # answered the study's questionnaire
    timed_out: bool = False  # their session ran longer than the study's limit
    joined_at: datetime | None = None  # when the session's clock started
    arm: str | None = None  # the study's arm they were allocated (app/raters/arms.py)
    practice_answered: int = 0  # practice screens answered (app/rating/practice.py)
    practice_correct: int = 0  # and answered right
    practice_failed: bool = False  # fell short of the practice's pass mark: the session ended

    @classmethod
    def of(cls, rater: Rater) -> ActiveRater:
        return cls(
            rater.id,
            rater.answers,
            rater.excluded,
            rater.screened_out_at is not None,
            rater.consented_at is not None,
            rater.consent_declined_at is not None,
            rater.questionnaire_at is not None,
            rater.timed_out_at is not None,
            rater.created_at,
            rater.arm,
            rater.practice_answered,
            rater.practice_correct,
            rater.practice_failed_at is not None,
        )


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
    upcoming: Upcoming | None = None  # the rater's next query, decided as this was served


def count_answer(
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
    if project.design_locked_at is None:  # (a copy of the settings may not know it yet)
        LOCK_DESIGN.run(session, {"project": project.id, "now": ids["now"]})


def settle_slot(
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


def after_check(
    session: Session,
    project: Project,
    rater: ActiveRater,
    now: datetime,
    upcoming: Upcoming | None,
) -> AnswerOutcome:
    # Checks are a few in a hundred answers: the thresholds work on the full rater.
    full = session.get_one(Rater, rater.id)
    changed = apply_thresholds(project=project, rater=full)
    screened = screens_out(project=project, rater=full)
    if screened:
        full.screened_out_at = now
    return AnswerOutcome(
        replayed=False, exclusion_changed=changed, screened_out=screened, upcoming=upcoming
    )


def _listed(value) -> list:
    """A JSON column as the driver gives it: parsed on PostgreSQL, text on SQLite."""
    return json.loads(value) if isinstance(value, str) else value


def submit_screen(
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
    format = named(served.format)
    if not isinstance(format, PickedScreen):
        raise Unprocessable(format.expected_answer(0, project.allow_cant_tell))
    shown = _listed(served.shown)
    picked: list[int] | None = None
    if picks is not None:
        found = format.picked_ids(shown, served.picks, keys_of(shown), picks)
        if isinstance(found, str):
            raise Unprocessable(found)
        picked = found
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
    reference = served.anchor_id if format.has_reference else None
    check = served.purpose == Purpose.attention
    passed = check and picked is not None and format.check_passed(reference, shown, picked)
    count_answer(session, project, rater, ids, check, passed)
    if check:
        return after_check(session, project, rater, ids["now"], Upcoming.of(served))
    slot_owner = settle_slot(session, served.slot_id, rater, picked is not None)
    if picked is None:
        return AnswerOutcome(replayed=False, upcoming=Upcoming.of(served))
    implied = format.implied_triplets(reference, shown, picked)
    context = [] if reference is None else [reference]
    judgement = {"format": format, "context": context, "shown": shown, "chosen": picked}
    return _judged(project, ids, response_time_ms, served, slot_owner, judgement, implied.tolist())


def _judged(
    project: Project,
    ids: dict,
    response_time_ms: int | None,
    served,
    owner: tuple[int | None, int | None],
    judgement: dict,
    triplets: list,
) -> AnswerOutcome:
    """An answered screen's outcome: its judgement row, then the triplets (anchor, closer,
    farther) it implies, for store_answer; the build or routing its slots belong to."""
    common = {**ids, "project": project.id, "elapsed": response_time_ms}
    adaptive = served.purpose in ADAPTIVE_PURPOSES
    return AnswerOutcome(
        replayed=False,
        upcoming=Upcoming.of(served),
        build_id=owner[0],
        routing_id=owner[1],
        judgement={**common, **judgement},
        implied=[
            {**common, "anchor": anchor, "closer": closer, "farther": farther, "adaptive": adaptive}
            for anchor, closer, farther in triplets
        ],
    )


def submit_sort(
    session: Session,
    project: Project,
    rater: ActiveRater,
    ids: dict,
    sent: list[tuple[str, str]] | None,
    response_time_ms: int | None,
    keys_of: Callable[[list[int]], dict[int, str]],
) -> AnswerOutcome:
    """An answer to a sorting screen: each item's side (None: "can't tell" for all),
    checked against what the screen showed before anything is written. Each item's
    assignment takes its side as its choice, and its slot is settled as a triplet's."""
    served = SCREEN_SERVED.run(session, ids)
    if served is None:
        raise NotFound(f"no query {ids['assignment']} was served to you")
    format = named(served.format)
    if format.answered_with != "sides":  # (the sorting screen's; SORT reads them)
        raise Unprocessable(format.expected_answer(served.picks))
    if served.screen_id is not None:  # one of the screen's other items: it holds no screen
        raise Unprocessable(
            f"query {ids['assignment']} is one item of the sorting screen "
            f"{served.screen_id}: answer that query_id, with a side for each of its items"
        )
    shown = _listed(served.shown)
    sides = [Choice.cant_tell.value] * len(shown)
    if sent is not None:
        found = SORT.sides_of(shown, keys_of(shown), sent, project.allow_cant_tell)
        if isinstance(found, str):
            raise Unprocessable(found)
        sides = found
    if served.answered_at is not None:
        return AnswerOutcome(replayed=True)
    claimed = SCREEN_ANSWER.run(
        session, {**ids, "choice": Choice(sides[0]), "chosen": sides, "elapsed": response_time_ms}
    )
    if claimed is None:
        return AnswerOutcome(replayed=True)
    count_answer(session, project, rater, ids, False, False)
    side_of = dict(zip(shown, sides, strict=True))
    siblings = sorting.siblings_answered(session, ids["assignment"], rater.id)
    sorting.ANSWER_SIBLING.run_many(
        session,
        [
            {"sibling": row.id, "side": Choice(side_of[row.anchor_id]), **ids}
            | {"elapsed": response_time_ms}
            for row in siblings
        ],
    )
    owner: tuple[int | None, int | None] = (None, None)
    for slot_id, item in [(served.slot_id, shown[0])] + [
        (r.slot_id, r.anchor_id) for r in siblings
    ]:
        settled = settle_slot(session, slot_id, rater, side_of[item] != Choice.cant_tell.value)
        owner = settled if settled[0] is not None else owner
    pivots = (served.lo_id, served.hi_id) if served.left_is_lo else (served.hi_id, served.lo_id)
    told = SORT.sorted_triplets(pivots, shown, sides)
    if not told:
        return AnswerOutcome(replayed=False)
    judgement = {
        "format": SORT,
        "context": list(pivots),
        "shown": shown,
        "chosen": sides,
    }
    return _judged(project, ids, response_time_ms, served, owner, judgement, told)
