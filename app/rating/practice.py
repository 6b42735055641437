"""Practice screens before the task: screens of the study's format with a known answer,
each answered once and followed by feedback ("correct", or the answer expected). Their
answers are stored apart (PracticeAnswer) and counted only on the rater's practice tally:
no build, model, quota or answer count reads them. With a pass mark, a participant with
fewer right than it ends there, on the screened-out path.

A practice screen's query id is PRACTICE_FIRST_ID plus its place in the practice: far
above any assignment's id, so the answer paths tell the two apart without a lookup, and
below 2**53, so a browser's JavaScript sends it back exactly."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.db import rows_changed
from app.core.errors import Conflict, NotFound, Unprocessable
from app.core.i18n import ENGLISH, N_, Wording
from app.models import PracticeAnswer, Project, Rater
from app.models._types import utcnow
from app.projects.path_schemas import MOST_PRACTICE_TRIALS
from app.rating import path
from app.rating.cards import Comparison, by_key, screen_of
from app.scheduling.answers import ActiveRater

PRACTICE_FIRST_ID = 2**52


def is_practice_id(query_id: int) -> bool:
    return PRACTICE_FIRST_ID <= query_id < PRACTICE_FIRST_ID + MOST_PRACTICE_TRIALS


def query_id(trial: int) -> int:
    """The query id a practice screen is served with (`trial`: its place, from 0)."""
    return PRACTICE_FIRST_ID + trial


@dataclass(frozen=True)
class Feedback:
    """What a practice answer is told: whether it was right, the keys a right answer
    picks and the keys it picked (["cant_tell"]: "can't tell")."""

    trial: int
    correct: bool
    expected: tuple[str, ...]
    given: tuple[str, ...]
    replayed: bool = False  # the answer had been stored before: nothing more recorded

    def message(self, names: dict[str, str], wording: Wording = ENGLISH) -> str:
        """In words, naming each expected item by its text (or key), quoted as the
        wording's language quotes."""
        if self.correct:
            return wording.gettext(N_("Correct!"))
        expected = wording.gettext(N_(", then ")).join(
            wording.quoted(names.get(key, key)) for key in self.expected
        )
        return wording.gettext(N_("Not quite: the expected answer was %(expected)s.")) % {
            "expected": expected
        }


def screen(*, session: Session, project: Project, rater: ActiveRater) -> Comparison | None:
    """The practice screen due now, drawn as the study's format draws its screens; None
    if an item of it was deleted since the practice was set."""
    trial = rater.practice_answered
    asked = path.practice_trials(project)[trial]
    shown = by_key(session, project, asked["items"])
    if shown is None:
        return None
    format = project.judgement
    if not format.served_as_screen:
        return replace(Comparison.triplet(query_id(trial), shown), practice=True)
    drawn = screen_of(query_id(trial), format, shown, len(asked["answer"]))
    return replace(drawn, practice=True)


def answer(
    *,
    session: Session,
    project: Project,
    rater: ActiveRater,
    query_id: int,
    choice: str | None,
    picks: list[str] | None,
    response_time_ms: int | None,
) -> Feedback:
    """Record the rater's answer to a practice screen and tell them how it went. Sent
    again, it records nothing more and tells the same; a screen other than the one due
    now is a 409, one the practice lacks a 404, an answer of the wrong shape a 422."""
    trial = query_id - PRACTICE_FIRST_ID
    trials = path.practice_trials(project)
    if not 0 <= trial < len(trials):
        raise NotFound(f"no practice screen {query_id} in this study")
    stored = _stored(session, rater, trial)
    if stored is not None:
        return stored
    if not path.in_practice(project, rater) or trial != rater.practice_answered:
        due = rater.practice_answered + 1
        raise Conflict(
            f"practice screen {trial + 1} is not the one to answer now"
            + (f" (screen {due} is)" if path.in_practice(project, rater) else "")
        )
    screen = trials[trial]
    given = project.judgement.practice_given(screen["items"], choice, picks)
    if isinstance(given, str):
        raise Unprocessable(given)
    correct = given == list(screen["answer"])
    right = rater.practice_correct + int(correct)
    mark = (project.practice or {}).get("pass_at_least")
    failed = trial + 1 == len(trials) and mark is not None and right < mark
    now = utcnow()
    claimed = session.execute(
        update(Rater)
        .where(Rater.id == rater.id, Rater.practice_answered == trial)
        .values(
            practice_answered=trial + 1,
            practice_correct=Rater.practice_correct + int(correct),
            practice_failed_at=now if failed else None,
            last_seen_at=now,
        )
    )
    if rows_changed(claimed) == 0:  # another request took this screen's answer first
        stored = _stored(session, rater, trial)
        if stored is None:
            raise Conflict(f"practice screen {trial + 1} is not the one to answer now")
        return stored
    session.add(
        PracticeAnswer(
            project_id=project.id,
            rater_id=rater.id,
            trial=trial,
            shown=list(screen["items"]),
            expected=list(screen["answer"]),
            given=given,
            correct=correct,
            response_time_ms=response_time_ms,
            arm=project.arm_shown,
            design_version=project.design_version,
            created_at=now,
        )
    )
    session.flush()
    rater.practice_answered, rater.practice_correct = trial + 1, right
    rater.practice_failed = failed
    return Feedback(trial, correct, tuple(screen["answer"]), tuple(given))


def _stored(session: Session, rater: ActiveRater, trial: int) -> Feedback | None:
    row = session.scalar(
        select(PracticeAnswer).where(
            PracticeAnswer.rater_id == rater.id, PracticeAnswer.trial == trial
        )
    )
    if row is None:
        return None
    return Feedback(trial, row.correct, tuple(row.expected), tuple(row.given), replayed=True)


def latest(*, session: Session, rater: ActiveRater) -> Feedback | None:
    """The feedback on the rater's last practice answer (the page shows it after a plain
    form post, which redirects)."""
    if rater.practice_answered == 0:
        return None
    return _stored(session, rater, rater.practice_answered - 1)


def skip_the_rest(*, session: Session, project: Project, rater: ActiveRater) -> None:
    """End the rater's practice where its next screen cannot be shown (an item of it was
    deleted since): they go on to the task, the pass mark waived."""
    total = len(path.practice_trials(project))
    session.execute(
        update(Rater)
        .where(Rater.id == rater.id, Rater.practice_answered == rater.practice_answered)
        .values(practice_answered=total)
    )
    rater.practice_answered = total
