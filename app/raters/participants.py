"""A study's participants as a researcher pays them: each rater's platform ids, how their
session ended, their answers and time, and the code they were shown. The page, the JSON
API and the CSV for a recruiting platform's bulk approval all read `participants`.

An outcome, most telling first: declined the consent (the session ended there, with the
no-consent code), failed the practice (fewer practice screens answered right than
its pass mark: the session ended there, with the screened-out code), failed attention checks (below the project's threshold,
whatever else happened: a platform lets the researcher return or reject them; with a
screened-out code set, their session ended there with that code), completed
(the completion code), out of work (the no-more-work code: nothing was left to ask
them), still answering (seen within a lease: app/raters/places.py), abandoned (neither,
and gone for longer than a lease, which gives their place back)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.spreadsheets import spreadsheet_safe
from app.models import Project, Rater
from app.models._types import utcnow
from app.raters import places
from app.raters.service import PLATFORM_PARAMETERS
from app.scheduling.thresholds import failed_attention


class Outcome(StrEnum):
    declined_consent = "declined_consent"
    failed_practice = "failed_practice"
    failed_attention = "failed_attention"
    timed_out = "timed_out"
    completed = "completed"
    out_of_work = "out_of_work"
    in_progress = "in_progress"
    abandoned = "abandoned"


OUTCOME_WORDS = {
    Outcome.declined_consent: "declined consent",
    Outcome.failed_practice: "failed the practice",
    Outcome.failed_attention: "failed attention checks",
    Outcome.timed_out: "ran out of time",
    Outcome.completed: "completed",
    Outcome.out_of_work: "out of work",
    Outcome.in_progress: "still answering",
    Outcome.abandoned: "abandoned",
}


@dataclass(frozen=True)
class Participant:
    rater_id: int
    participant_id: str
    platform: str | None
    platform_ids: dict[str, Any]
    outcome: Outcome
    answers: int
    attention_passed: int
    attention_failed: int
    started_at: datetime
    last_seen_at: datetime | None
    minutes: float | None
    completion_code: str | None
    excluded: bool
    exclusion_reason: str
    consented_at: datetime | None
    consent_version: int | None
    questionnaire: dict[str, Any] | None
    arm: str | None = None
    version: int | None = None  # the design version they joined under
    practice_answered: int = 0
    practice_correct: int = 0

    @property
    def participant(self) -> str:
        """The platform's participant id, under the name bulk approval reads."""
        return self.participant_id

    @property
    def code(self) -> str | None:
        return self.completion_code


def _outcome(project: Project, rater: Rater, now: datetime) -> Outcome:
    if rater.consent_declined_at is not None:
        return Outcome.declined_consent
    if rater.practice_failed_at is not None:
        return Outcome.failed_practice
    if failed_attention(project=project, rater=rater) is not None:
        return Outcome.failed_attention
    if rater.timed_out_at is not None and rater.completed_at is None:
        return Outcome.timed_out
    if rater.completed_at is not None:
        return Outcome.completed
    if rater.out_of_work_at is not None:
        return Outcome.out_of_work
    if places.is_live(project, rater, now):
        return Outcome.in_progress
    return Outcome.abandoned


def _code_shown(project: Project, rater: Rater) -> str | None:
    """The code the rater's last screen showed them (None: they were shown none)."""
    if rater.consent_declined_at is not None:
        return project.no_consent_code
    if rater.screened_out_at is not None or rater.practice_failed_at is not None:
        return project.screened_out_code
    if rater.timed_out_at is not None and rater.completed_at is None:
        return project.timeout_code
    if rater.completed_at is not None:
        return project.completion_code
    if rater.out_of_work_at is not None:
        return project.no_more_work_code or project.completion_code
    return None


def participants(
    *, session: Session, project: Project, now: datetime | None = None, only: int | None = None
) -> list[Participant]:
    """Every rater of the project, in the order they joined (`only`: that rater alone)."""
    now = now or utcnow()
    found = []
    which = select(Rater).where(Rater.project_id == project.id)
    if only is not None:
        which = which.where(Rater.id == only)
    for rater in session.scalars(which.order_by(Rater.id)):
        ended = (
            rater.screened_out_at
            or rater.practice_failed_at
            or rater.completed_at
            or rater.out_of_work_at
            or rater.last_seen_at
        )
        minutes = None
        if ended is not None and rater.created_at is not None:
            # (A join stamps last_seen_at a moment before the row's created_at.)
            minutes = round(max((ended - rater.created_at).total_seconds(), 0.0) / 60, 1)
        found.append(
            Participant(
                rater_id=rater.id,
                participant_id=rater.external_id,
                platform=rater.platform,
                platform_ids=dict(rater.platform_ids or {}),
                outcome=_outcome(project, rater, now),
                answers=rater.answers,
                attention_passed=rater.attention_passed,
                attention_failed=rater.attention_failed,
                started_at=rater.created_at,
                last_seen_at=rater.last_seen_at,
                minutes=minutes,
                completion_code=_code_shown(project, rater),
                excluded=rater.excluded,
                exclusion_reason=rater.exclusion_reason or "",
                consented_at=rater.consented_at,
                consent_version=rater.consent_version,
                questionnaire=rater.questionnaire_answers,
                arm=rater.arm,
                version=rater.design_version,
                practice_answered=rater.practice_answered,
                practice_correct=rater.practice_correct,
            )
        )
    return found


def of_outcome(found: list[Participant], outcome: Outcome | None) -> list[Participant]:
    """Those whose session ended so (all of them for None)."""
    return found if outcome is None else [p for p in found if p.outcome is outcome]


def outcome_counts(found: list[Participant]) -> dict[Outcome, int]:
    counts = dict.fromkeys(Outcome, 0)
    for participant in found:
        counts[participant.outcome] += 1
    return counts


# The column `participant` is every participant's id, whatever their platform (it is the
# plain link's own parameter: its value there, and in the JSON's platform_ids).
PLATFORM_COLUMNS = [
    name for names in PLATFORM_PARAMETERS.values() for name in names if name != "participant"
]
CSV_COLUMNS = [
    "participant",
    "participant_id",
    "platform",
    *PLATFORM_COLUMNS,
    "outcome",
    "answers",
    "attention_checks_passed",
    "attention_checks_failed",
    "started_at",
    "last_seen_at",
    "minutes",
    "code",
    "completion_code",
    "excluded",
    "exclusion_reason",
    "consented_at",
    "consent_version",
    "arm",
    "version",
    "practice_answered",
    "practice_correct",
]


def participants_csv(found: list[Participant], questions: Sequence[str] = ()) -> bytes:
    """The list as a spreadsheet opens it: UTF-8 with a byte-order mark (Excel reads
    UTF-8 only with one), one column per platform parameter met and one per question of
    the questionnaire (`q_<name>`; several choices joined by "; "), and every cell that
    came from a participant written so that no spreadsheet takes it for a formula."""
    used = {name for p in found for name in p.platform_ids}
    columns = [c for c in CSV_COLUMNS if c not in PLATFORM_COLUMNS or c in used]
    columns += [f"q_{name}" for name in questions]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    for p in found:
        code = spreadsheet_safe(p.completion_code) or ""
        cells = {
            "participant": spreadsheet_safe(p.participant_id),
            "participant_id": spreadsheet_safe(p.participant_id),
            "platform": p.platform or "",
            **{name: spreadsheet_safe(str(p.platform_ids.get(name, ""))) for name in used},
            "outcome": p.outcome.value,
            "answers": p.answers,
            "attention_checks_passed": p.attention_passed,
            "attention_checks_failed": p.attention_failed,
            "started_at": _iso(p.started_at),
            "last_seen_at": _iso(p.last_seen_at),
            "minutes": "" if p.minutes is None else p.minutes,
            "code": code,
            "completion_code": code,
            "excluded": "true" if p.excluded else "false",
            "exclusion_reason": spreadsheet_safe(p.exclusion_reason),
            "consented_at": _iso(p.consented_at),
            "consent_version": "" if p.consent_version is None else p.consent_version,
            "arm": spreadsheet_safe(p.arm or ""),
            "version": "" if p.version is None else p.version,
            "practice_answered": p.practice_answered,
            "practice_correct": p.practice_correct,
            **{f"q_{name}": _cell((p.questionnaire or {}).get(name)) for name in questions},
        }
        writer.writerow([cells[c] for c in columns])
    return ("\ufeff" + buffer.getvalue()).encode("utf-8")


def _cell(answer: Any) -> Any:
    if answer is None:
        return ""
    if isinstance(answer, list):
        return spreadsheet_safe("; ".join(answer))
    return spreadsheet_safe(answer) if isinstance(answer, str) else answer


def question_names(project: Project) -> list[str]:
    return [question["name"] for question in (project.questionnaire or {}).get("questions", [])]


def _iso(moment: datetime | None) -> str:
    return "" if moment is None else moment.isoformat()


def places_taken(*, session: Session, project: Project) -> int | None:
    """The places taken now under the study's quota (None without one)."""
    return None if project.quota is None else places.taken(session=session, project=project)
