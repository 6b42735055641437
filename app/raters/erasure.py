"""A participant's data request: their records as Closer holds them, and their erasure.

Erasing a participant (found by the platform id the participants list shows) deletes
their rater with everything that names it: their answers and the screens they answered
(judgements), practice answers, attention checks and served queries, consent and
questionnaire, platform ids and browser sessions. Unfinished builds replay without
their answers and every fitted passive model fits again, as after an exclusion; the
erasure is logged without who it was (ParticipantErasure). A place they were paid for
stays taken: the study does not recruit one more because of it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app.core.db import rows_changed
from app.core.errors import NotFound
from app.models import (
    Item,
    Judgement,
    ParticipantErasure,
    PracticeAnswer,
    Project,
    QuerySlot,
    Rater,
    Researcher,
    Triplet,
)
from app.models._types import utcnow
from app.raters import detail, participants, quality
from app.training.runs import refit_without_erased
from app.triplets import tally

# Outcomes whose session ended with a code the recruiting platform pays for.
PAID = frozenset({participants.Outcome.completed, participants.Outcome.out_of_work})
# A rater's records are a session's worth; a runaway count still ends somewhere.
RECORDS_LIMIT = 100_000


def participant_rater(*, session: Session, project: Project, participant: str) -> Rater:
    rater = session.scalar(
        select(Rater).where(Rater.project_id == project.id, Rater.external_id == participant)
    )
    if rater is None:
        raise NotFound(
            f"no participant '{participant}' in project {project.id} (the platform id as "
            "the participants list shows it)"
        )
    return rater


@dataclass(frozen=True)
class Erased:
    erased_at: datetime
    outcome: str
    answers: int  # the triplets that went
    judgements: int
    practice_answers: int
    builds_replayed: int
    models_refitting: int
    place_kept: bool


def erase(
    *, session: Session, project: Project, researcher: Researcher, participant: str
) -> Erased:
    rater = participant_rater(session=session, project=project, participant=participant)
    outcome = next(
        p.outcome
        for p in participants.participants(session=session, project=project, only=rater.id)
    )
    rater_id, arm, counted = rater.id, rater.arm, not rater.excluded
    practised = session.scalar(select(func.count()).where(PracticeAnswer.rater_id == rater_id)) or 0
    # The rater goes first: an answer of theirs in flight holds their served query's row,
    # which the deletion waits for, and one that comes after finds no query to answer.
    session.delete(rater)
    session.flush()
    theirs = Triplet.rater_id == rater_id
    answers = tally.forget(session, project.id, theirs)
    session.execute(delete(Triplet).where(Triplet.project_id == project.id, theirs))
    judgements = rows_changed(
        session.execute(
            delete(Judgement).where(
                Judgement.project_id == project.id, Judgement.rater_id == rater_id
            )
        )
    )
    session.execute(
        update(QuerySlot)
        .where(QuerySlot.project_id == project.id, QuerySlot.lease_rater_id == rater_id)
        .values(lease_rater_id=None, lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )
    now = utcnow()
    place_kept = outcome in PAID
    session.add(
        ParticipantErasure(
            project_id=project.id,
            erased_at=now,
            erased_by=researcher.id,
            outcome=outcome.value,
            arm=arm,
            held_place=place_kept,
            answers=answers,
            judgements=judgements,
            practice_answers=practised,
        )
    )
    replayed = refitting = 0
    if answers and counted:
        replayed = quality.replay_builds(session=session, project=project)
        refitting = len(refit_without_erased(session, project.id))
    session.flush()
    return Erased(
        erased_at=now,
        outcome=outcome.value,
        answers=answers,
        judgements=judgements,
        practice_answers=practised,
        builds_replayed=replayed,
        models_refitting=refitting,
        place_kept=place_kept,
    )


def erasures(*, session: Session, project: Project) -> list[ParticipantErasure]:
    return list(
        session.scalars(
            select(ParticipantErasure)
            .where(ParticipantErasure.project_id == project.id)
            .order_by(ParticipantErasure.id)
        )
    )


def records(*, session: Session, project: Project, participant: str) -> dict[str, Any]:
    """Everything Closer holds about one participant, for their data request: who they
    are to the study, how their session went, their consent and questionnaire, every
    screen they answered (attention checks and practice too) and the answers the models
    learn from, items by key."""
    rater = participant_rater(session=session, project=project, participant=participant)
    (summary,) = participants.participants(session=session, project=project, only=rater.id)
    keys = {
        row.id: row.key
        for row in session.execute(select(Item.id, Item.key).where(Item.project_id == project.id))
    }
    triplets = session.execute(
        select(Triplet)
        .where(Triplet.project_id == project.id, Triplet.rater_id == rater.id)
        .order_by(Triplet.id)
        .limit(RECORDS_LIMIT)
    ).scalars()
    judged = session.execute(
        select(Judgement)
        .where(Judgement.project_id == project.id, Judgement.rater_id == rater.id)
        .order_by(Judgement.id)
        .limit(RECORDS_LIMIT)
    ).scalars()
    practice = session.execute(
        select(PracticeAnswer)
        .where(PracticeAnswer.rater_id == rater.id)
        .order_by(PracticeAnswer.trial)
    ).scalars()

    def named(ids: list) -> list:
        return [keys.get(i, i) if isinstance(i, int) else i for i in ids]

    return {
        "project": {"id": project.id, "name": project.name},
        "participant": {
            "participant": summary.participant_id,
            "platform": summary.platform,
            "platform_ids": summary.platform_ids,
            "outcome": summary.outcome.value,
            "started_at": summary.started_at,
            "last_seen_at": summary.last_seen_at,
            "completed_at": rater.completed_at,
            "code_shown": summary.completion_code,
            "arm": summary.arm,
            "design_version": summary.version,
            "excluded": summary.excluded,
            "exclusion_reason": summary.exclusion_reason,
            "attention_checks_passed": summary.attention_passed,
            "attention_checks_failed": summary.attention_failed,
            "agreement_with_majority": rater.majority_agreement,
            "median_response_ms": rater.median_response_ms,
        },
        "consent": {
            "consented_at": rater.consented_at,
            "consent_version": rater.consent_version,
            "declined_at": rater.consent_declined_at,
        },
        "questionnaire": {
            "answers": rater.questionnaire_answers,
            "answered_at": rater.questionnaire_at,
        },
        "screens": [
            {
                "answered_at": answer.answered_at,
                "asked_for": answer.purpose,
                "format": answer.format.name,
                "anchor": answer.anchor,
                "left": answer.left,
                "right": answer.right,
                "shown": answer.shown,
                "chose": answer.picked or answer.chosen,
                "attention_check_passed": answer.passed,
                "response_time_ms": answer.response_time_ms,
                "plays": answer.plays,
            }
            for answer in detail.answers(session=session, rater=rater, limit=RECORDS_LIMIT)
        ],
        "judgements": [
            {
                "judgement_id": judgement.id,
                "format": judgement.format.name,
                "context": named(judgement.context),
                "shown": named(judgement.shown),
                "chosen": named(judgement.chosen),
                "response_time_ms": judgement.response_time_ms,
                "created_at": judgement.created_at,
            }
            for judgement in judged
        ],
        "answers": [
            {
                "id": triplet.id,
                "anchor": keys.get(triplet.anchor_id),
                "closer": keys.get(triplet.closer_id),
                "farther": keys.get(triplet.farther_id),
                "judgement_id": triplet.judgement_id,
                "response_time_ms": triplet.response_time_ms,
                "created_at": triplet.created_at,
            }
            for triplet in triplets
        ],
        "practice": [
            {
                "trial": answer.trial,
                "shown": answer.shown,
                "expected": answer.expected,
                "given": answer.given,
                "correct": answer.correct,
                "response_time_ms": answer.response_time_ms,
                "created_at": answer.created_at,
            }
            for answer in practice
        ],
    }
