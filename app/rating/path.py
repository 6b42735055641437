"""The participant's path through a study, as the researcher configures it: consent, the
instructions, the task, and the debrief with the code at the end. Each step is optional;
a study that sets none is today's: instructions (if any), the task, the code.

Where a participant stands is derived, never stored as a step: from the study's settings
and what the rater did (agreed, declined, answered), so that the pages and the JSON API
(`step` in every rater state) say the same, and a setting changed mid-study moves
everyone at once."""

from __future__ import annotations

import math
from datetime import timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from app.core.errors import Conflict, Unprocessable, echo
from app.core.i18n import ENGLISH, N_, Wording
from app.models import Project, Rater
from app.models._types import utcnow
from app.scheduling.answers import ActiveRater
from app.scheduling.service import is_complete


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


def runs_out(*, session: Session, project: Project, rater: ActiveRater) -> bool:
    """Whether the rater's session has run longer than the study's limit (from joining)
    before its task was done: it ends there, marked once; nothing more is served or
    recorded. A session that completed in time keeps its completion code."""
    if rater.timed_out:
        return True
    limit = project.max_session_minutes
    if limit is None or rater.joined_at is None or is_complete(project, rater.answers):
        return False
    now = utcnow()
    if now - rater.joined_at <= timedelta(minutes=limit):
        return False
    session.execute(
        update(Rater)
        .where(Rater.id == rater.id, Rater.timed_out_at.is_(None))
        .values(timed_out_at=now)
    )
    rater.timed_out = True
    return True


def questionnaire_when(project: Project) -> str | None:
    return None if project.questionnaire is None else project.questionnaire["when"]


def before_the_task(project: Project, rater: ActiveRater) -> bool:
    """Whether the rater has yet to agree to the study's consent (or declined it), or to
    answer a questionnaire that comes before the task: nothing is served to them, and no
    answer they send is recorded."""
    if asks_consent(project) and not rater.consented:
        return True
    return questionnaire_when(project) == "before" and not rater.questionnaire_sent


def owes_questionnaire_after(project: Project, rater: ActiveRater | None) -> bool:
    """Whether a session that just ended with a code still owes the questionnaire that
    comes after the task: the code waits for it (a rater unknown here has only just
    finished: the answer path that ended their task does not read them)."""
    if questionnaire_when(project) != "after":
        return False
    return rater is None or not rater.questionnaire_sent


def step(
    project: Project,
    rater: ActiveRater | None,
    *,
    ended: bool,
    joining: bool,
    answers: int,
    questionnaire_due: bool = False,
) -> Step:
    """Where the rater stands: `ended` once their session has a code (or ended without
    one, declined); `joining` for the state a join answers (nothing served yet);
    `questionnaire_due` once the task is done and the questionnaire after it is owed."""
    if questionnaire_due:
        return Step.questionnaire
    if ended:
        declined = rater is not None and rater.declined
        return Step.debrief if project.debrief and not declined else Step.done
    if rater is not None and asks_consent(project) and not rater.consented:
        return Step.consent
    if rater is not None and before_the_task(project, rater):
        return Step.questionnaire
    if joining and answers == 0 and project.instructions:
        return Step.instructions
    if rater is not None and in_practice(project, rater):
        return Step.practice
    if not joining and at_a_break(project, answers):
        return Step.break_
    return Step.task


def practice_trials(project: Project) -> list[dict]:
    """The study's practice screens as its raters see them (an arm may set its own)."""
    return (project.practice or {}).get("trials", [])


def in_practice(project: Project, rater: ActiveRater) -> bool:
    """Whether the rater has practice screens to answer before the task: the study has
    them, and the rater has answered neither all of them nor anything of the task (a
    practice added mid-study is not asked of those already at work)."""
    trials = practice_trials(project)
    return (
        bool(trials)
        and rater.answers == 0
        and not rater.practice_failed
        and rater.practice_answered < len(trials)
    )


def block_of(project: Project, answers: int) -> tuple[int, int]:
    """The block the rater's next answer is in (1-based), and how many blocks there are;
    a session without a target or blocks is one block."""
    target, blocks = project.answers_per_rater, project.blocks
    if blocks <= 1 or target <= 0:
        return 1, 1
    size = -(-target // blocks)  # the last block may be shorter
    return min(answers // size + 1, blocks), blocks


def at_a_break(project: Project, answers: int) -> bool:
    """Whether the rater has just finished a block (and another follows): the next
    comparison comes after a break."""
    return answers > 0 and block_of(project, answers - 1)[0] < block_of(project, answers)[0]


def answer_questionnaire(
    *, session: Session, project: Project, rater: ActiveRater, answers: dict[str, Any]
) -> None:
    """Store the rater's answers, each checked against its question (a 422 names every
    question at fault). The caller has checked that the questionnaire is due now. Sent
    again, the same answers change nothing; other ones are a 409."""
    checked = checked_answers(project.questionnaire or {}, answers)
    if rater.questionnaire_sent:
        stored = session.get(Rater, rater.id)
        if stored is None or stored.questionnaire_answers != checked:
            raise Conflict("the questionnaire was answered already")
        return
    now = utcnow()
    session.execute(
        update(Rater)
        .where(Rater.id == rater.id, Rater.questionnaire_at.is_(None))
        .values(questionnaire_answers=checked, questionnaire_at=now, last_seen_at=now)
    )
    rater.questionnaire_sent = True


MOST_TEXT = 2_000


def checked_answers(questionnaire: dict, answers: dict[str, Any]) -> dict[str, Any]:
    """The answers as stored (a skipped optional question: null), or a 422 naming each
    question at fault: a required one unanswered, a value of the wrong kind, an option
    the question lacks, a name the questionnaire lacks."""
    checked, problems = answers_and_problems(questionnaire, answers)
    if problems:
        raise Unprocessable("; ".join(f"{name}: {problem}" for name, problem in problems.items()))
    return checked


def answers_and_problems(
    questionnaire: dict, answers: dict[str, Any], wording: Wording = ENGLISH
) -> tuple[dict[str, Any], dict[str, str]]:
    """The answers as they would be stored, and what is wrong, by question name (in the
    wording's language: the page shows them beside their questions)."""
    said = wording.gettext
    questions = {question["name"]: question for question in questionnaire.get("questions", [])}
    problems = {
        echo(name): said(N_("not a question of this questionnaire"))
        for name in answers
        if name not in questions
    }
    checked: dict[str, Any] = {}
    for name, question in questions.items():
        value = answers.get(name)
        if value in (None, "", []):
            if question.get("required", True):
                problems[name] = said(N_("an answer is required"))
            checked[name] = None
            continue
        problem = _problem(question, value, wording)
        if problem:
            problems[name] = problem
        checked[name] = value
    return checked, problems


def _problem(question: dict, value: Any, wording: Wording) -> str | None:
    said = wording.gettext
    kind, options = question["kind"], question.get("options", [])
    if kind == "text":
        if not isinstance(value, str):
            return said(N_("must be text"))
        if len(value) > MOST_TEXT:
            return said(N_("at most %(count)s characters")) % {"count": wording.number(MOST_TEXT)}
        return None
    if kind == "number":
        good = isinstance(value, int | float) and not isinstance(value, bool)
        return None if good and math.isfinite(value) else said(N_("must be a number"))
    if kind == "choices":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return said(N_("must be a list of the options"))
        if len(set(value)) != len(value):
            return said(N_("an option is chosen twice"))
        wrong = [v for v in value if v not in options]
        if wrong:
            return said(N_("'%(option)s' is not one of its options")) % {"option": echo(wrong[0])}
        return None
    if not isinstance(value, str) or value not in options:  # choice, likert
        return said(N_("must be one of: %(options)s")) % {"options": ", ".join(options)}
    return None


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
