from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.core.fields import RequestModel
from app.formats import TRIPLET


class RaterOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    external_id: str
    platform: str | None
    platform_ids: dict[str, Any]
    answers: int
    attention_passed: int
    attention_failed: int
    attention_accuracy: float | None
    majority_compared: int
    majority_agreement: float | None
    median_response_ms: float | None = Field(
        description="Median time per answer, as the quality figures last measured it"
    )
    timed_answers: int = Field(description="How many answers that median is over")
    excluded: bool
    exclusion_reason: str
    exclusion_override: bool | None
    completed_at: datetime | None
    last_seen_at: datetime | None
    created_at: datetime


class RaterDecision(RequestModel):
    model_config = ConfigDict(extra="forbid")

    excluded: bool | None = Field(
        description="true: leave this rater's answers out; false: keep them whatever the "
        "thresholds say; null: let the project's thresholds decide"
    )


class ParticipantOut(BaseModel):
    rater_id: int
    participant_id: str = Field(
        description="The platform's participant id (or an anonymous one of ours)"
    )
    platform: str | None = Field(description="prolific, mturk, participant, or null")
    platform_ids: dict[str, Any] = Field(
        description="Every platform parameter the link carried (STUDY_ID, SESSION_ID, …)"
    )
    participant: str = Field(description="The same id, under the name bulk approval reads")
    outcome: str = Field(
        description="declined_consent (the session ended at the consent), failed_practice "
        "(fewer practice screens right than the pass mark: ended there), failed_attention "
        "(below the attention threshold, whatever else), timed_out (the session ran "
        "longer than max_session_minutes), "
        "completed, out_of_work (shown the no-more-work code), in_progress (seen within "
        "the study's lease: lease_seconds) or abandoned (quiet for longer: their place, "
        "under a quota, is given back)"
    )
    answers: int
    attention_passed: int
    attention_failed: int
    started_at: datetime
    last_seen_at: datetime | None
    minutes: float | None = Field(description="From joining to the end (or the last answer)")
    completion_code: str | None = Field(description="The code their last screen showed them")
    code: str | None = Field(description="The same code, under the name bulk approval reads")
    excluded: bool = Field(description="Whether their answers are left out of builds and models")
    exclusion_reason: str = Field(
        description="Why (the thresholds they fell below, or the researcher's decision)"
    )
    consented_at: datetime | None = Field(
        description="When they agreed to the study's consent (null: not asked, or not given)"
    )
    consent_version: int | None = Field(description="The version of the consent they agreed to")
    questionnaire: dict[str, Any] | None = Field(
        description="Their answers to the questionnaire by question name (null: none sent)"
    )
    arm: str | None = Field(
        default=None, description="The study's arm they were allocated (null: no arms)"
    )
    version: int | None = Field(
        default=None, description="The study's design version when they joined"
    )
    practice_answered: int = Field(default=0, description="Practice screens answered")
    practice_correct: int = Field(default=0, description="Practice screens answered right")


class RaterAnswerOut(BaseModel):
    answered_at: datetime
    purpose: str = Field(description="Why it was asked: random, a CompRF node, attention check, …")
    format: str = Field(default=TRIPLET.name, description="What the screen asked")
    anchor: str = Field(
        description="triplet: the item on top; sort: the item placed (one row per item of "
        "a sorting screen); rank: the reference; else empty"
    )
    left: str = Field(description="triplet: the left candidate; sort: the left pivot; else empty")
    right: str = Field(
        description="triplet: the right candidate; sort: the right pivot; else empty"
    )
    shown: list[str] = Field(
        default=[], description="odd_one_out, rank: the items' keys in display order"
    )
    choice: str = Field(description="left, right or cant_tell; picked (a screen's picks)")
    chosen: str | None = Field(description="The key of the candidate chosen")
    picked: list[str] = Field(default=[], description="A screen's picks, in the order picked")
    response_time_ms: int | None
    passed: bool | None = Field(description="An attention check's result; null otherwise")


class ResponseTimesOut(BaseModel):
    timed: int = Field(description="Answers with a response time")
    p25: float | None = Field(description="Seconds: a quarter of the answers took less")
    median: float | None
    p75: float | None
    project_median: float | None = Field(description="Every rater's, for comparison")


class RaterAnswersOut(BaseModel):
    response_times: ResponseTimesOut
    answers: list[RaterAnswerOut] = Field(description="Newest first, up to `limit`")


class ArmPlacesOut(BaseModel):
    name: str
    target: int | None = Field(description="Completions wanted (null: no cap)")
    open: bool = Field(description="Whether it takes newcomers at all (false: stopped)")
    taken: int = Field(description="Places taken now: completed plus live sessions")
    completed: int
    live: int = Field(description="Sessions seen within a lease that have not ended")
    takes_newcomers: bool = Field(description="Open and below its target")


class ErasureOut(BaseModel):
    """What a participant's erasure took away, and what follows from it."""

    erased_at: datetime
    outcome: str = Field(description="How their session had ended, as the participants list said")
    answers: int = Field(description="Their answers (triplets) deleted")
    judgements: int = Field(description="The screens they answered, deleted")
    practice_answers: int
    builds_replayed: int = Field(description="Unfinished builds started over without them")
    models_refitting: int = Field(description="Fitted models queued to fit again without them")
    place_kept: bool = Field(
        description="Whether their place stays taken (a session they were paid for)"
    )


class ErasureLogOut(BaseModel):
    """One erasure as the study records it: never who it was."""

    model_config = ConfigDict(from_attributes=True)

    erased_at: datetime
    erased_by: int | None = Field(description="The researcher who erased them")
    outcome: str
    arm: str | None
    held_place: bool
    answers: int
    judgements: int
    practice_answers: int
