"""The participant's path through a study, as the researcher configures it: consent, the
instructions, the task, and the debrief with the code at the end. Each step is optional;
a study that sets none is today's: instructions (if any), the task, the code.

Where a participant stands is derived, never stored as a step: from the study's settings
and what the rater did (agreed, declined, answered), so that the pages and the JSON API
(`step` in every rater state) say the same, and a setting changed mid-study moves
everyone at once."""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import update
from sqlalchemy.orm import Session

from app.core.errors import Conflict
from app.models import Project, Rater
from app.models._types import utcnow
from app.scheduling.answers import ActiveRater


class Step(StrEnum):
    consent = "consent"
    instructions = "instructions"
    practice = "practice"
    task = "task"
    break_ = "break"
    questionnaire = "questionnaire"
    debrief = "debrief"
    done = "done"


def asks_consent(project: Project) -> bool:
    return project.consent is not None


def consent_shown(project: Project) -> dict | None:
    """The consent as the participant is asked it, with the version they agree to."""
    if project.consent is None:
        return None
    return {**project.consent, "version": project.consent_version}


def before_the_task(project: Project, rater: ActiveRater) -> bool:
    """Whether the rater has yet to agree to the study's consent (or declined it):
    nothing is served to them, and nothing they send is recorded."""
    return asks_consent(project) and not rater.consented


def step(
    project: Project, rater: ActiveRater | None, *, ended: bool, joining: bool, answers: int
) -> Step:
    """Where the rater stands: `ended` once their session has a code (or ended without
    one, declined); `joining` for the state a join answers (nothing served yet)."""
    if ended:
        declined = rater is not None and rater.declined
        return Step.debrief if project.debrief and not declined else Step.done
    if rater is not None and before_the_task(project, rater):
        return Step.consent
    if joining and answers == 0 and project.instructions:
        return Step.instructions
    return Step.task


def answer_consent(*, session: Session, project: Project, rater: ActiveRater, agree: bool) -> None:
    """Record the rater's answer to the consent: agreeing records when and to which
    version of its text; declining ends the session. Sent again, the same answer changes
    nothing; the other answer is a 409 (a decision once made stands)."""
    if not asks_consent(project):
        raise Conflict("this study asks no consent: go on with GET …/next")
    if rater.consented or rater.declined:
        if rater.consented != agree:
            raise Conflict(
                "consent was already "
                + ("given" if rater.consented else "declined, and the session ended")
            )
        return
    now = utcnow()
    values = (
        {"consented_at": now, "consent_version": project.consent_version}
        if agree
        else {"consent_declined_at": now}
    )
    session.execute(
        update(Rater)
        .where(
            Rater.id == rater.id,
            Rater.consented_at.is_(None),
            Rater.consent_declined_at.is_(None),
        )
        .values(last_seen_at=now, **values)
    )
    rater.consented, rater.declined = agree, not agree
