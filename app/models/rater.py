from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Float,
    ForeignKey,
    SQLColumnExpression,
    String,
    Text,
    UniqueConstraint,
    cast,
    literal,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base
from app.models._types import JsonValue, Timestamp, utcnow

# What a caller who may not see the participants' platform ids is shown instead of one:
# the rater's row id, which means nothing outside this project.
PSEUDONYM_PREFIX = "rater-"


def shown_name(rater: Rater, identified: bool) -> str:
    """A rater as a caller sees them: their platform id, or their pseudonym."""
    return rater.external_id if identified else f"{PSEUDONYM_PREFIX}{rater.id}"


def rater_label(identified: bool) -> SQLColumnExpression[str]:
    """The column that names a rater in an export: their platform id, or their pseudonym."""
    if identified:
        return Rater.external_id
    return literal(PSEUDONYM_PREFIX).concat(cast(Rater.id, String))


class Rater(Base):
    """A person answering queries, known by the id their recruiting platform gave them.

    Each browser holds a random session token (see RaterSession). The counters
    measure quality: attention checks passed and failed, and how often the rater's
    answers agree with the majority of others on the same query. `exclusion_override` is
    the researcher's word (True: excluded, False: included whatever the thresholds say);
    `excluded` is the decision in force: the override where there is one, else the
    project's thresholds. An excluded rater's answers are kept, flagged by the rater, and
    left out of builds and training until the decision is reversed.
    """

    __tablename__ = "raters"
    __table_args__ = (
        UniqueConstraint("project_id", "external_id", name="uq_raters_project_id_external_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(200))
    platform: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)

    platform_ids: Mapped[dict[str, Any]] = mapped_column(JsonValue, default=dict)
    answers: Mapped[int] = mapped_column(default=0)
    attention_passed: Mapped[int] = mapped_column(default=0)
    attention_failed: Mapped[int] = mapped_column(default=0)
    majority_compared: Mapped[int] = mapped_column(default=0)
    majority_agreement: Mapped[float | None] = mapped_column(Float)
    excluded: Mapped[bool] = mapped_column(default=False)
    exclusion_reason: Mapped[str] = mapped_column(Text, default="")
    exclusion_override: Mapped[bool | None] = mapped_column()
    # Their median time per answer over the answers timed, as of the last refresh of
    # the quality figures (with the agreement): the speeder threshold reads it.
    median_response_ms: Mapped[float | None] = mapped_column(Float)
    timed_answers: Mapped[int] = mapped_column(default=0, server_default="0")
    completed_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # When the session ended for want of anything left to ask them (the no-more-work code).
    out_of_work_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # When the session ended because they fell below the attention-check threshold, in a
    # project with a code for that (the screened-out code): nothing more is asked of them.
    screened_out_at: Mapped[datetime | None] = mapped_column(Timestamp)
    last_seen_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # Their answer to the study's consent: when they agreed (and to which version of its
    # text), or when they declined (the session ended there, with the no-consent code).
    consented_at: Mapped[datetime | None] = mapped_column(Timestamp)
    consent_version: Mapped[int | None] = mapped_column()
    consent_declined_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # When their session ended for running longer than the study's limit.
    timed_out_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # Their answers to the study's questionnaire, by question name, and when they sent them.
    questionnaire_answers: Mapped[dict[str, Any] | None] = mapped_column(JsonValue)
    questionnaire_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # The study's arm they were allocated on joining, and the design version then.
    arm: Mapped[str | None] = mapped_column(String(64))
    design_version: Mapped[int | None] = mapped_column()
    # Their practice screens answered and answered right (app/rating/practice.py), and
    # when they fell short of the study's pass mark: the session ended there.
    practice_answered: Mapped[int] = mapped_column(default=0, server_default="0")
    practice_correct: Mapped[int] = mapped_column(default=0, server_default="0")
    practice_failed_at: Mapped[datetime | None] = mapped_column(Timestamp)

    @property
    def attention_accuracy(self) -> float | None:
        checks = self.attention_passed + self.attention_failed
        return self.attention_passed / checks if checks else None


class RaterSession(Base):
    """One browser's session of a rater; only the token's hash is stored. A participant
    who joins again (another device, a cleared cookie, or someone who merely knows the
    participant id) gets a session of their own: no join revokes another's."""

    __tablename__ = "rater_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("raters.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class PracticeAnswer(Base):
    """One answer to a practice screen: what it showed, the answer expected and the one
    given. Kept apart from the study's answers: no build, model or count reads it."""

    __tablename__ = "practice_answers"
    __table_args__ = (
        UniqueConstraint("rater_id", "trial", name="uq_practice_answers_rater_id_trial"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    rater_id: Mapped[int] = mapped_column(ForeignKey("raters.id", ondelete="CASCADE"))
    trial: Mapped[int] = mapped_column()  # its place in the study's practice, from 0
    shown: Mapped[list[str]] = mapped_column(JsonValue)  # item keys, in screen order
    expected: Mapped[list[str]] = mapped_column(JsonValue)
    given: Mapped[list[str]] = mapped_column(JsonValue)  # keys, or ["cant_tell"]
    correct: Mapped[bool] = mapped_column()
    response_time_ms: Mapped[int | None] = mapped_column()
    arm: Mapped[str | None] = mapped_column(String(64))
    design_version: Mapped[int | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class ParticipantErasure(Base):
    """A participant erased at their request, as the study's record of it: when, by whom
    and how much went, never who (no platform id, no rater id). A session that ended
    with a code the participant was paid for keeps its place taken (`held_place`): an
    erasure does not reopen a place a recruiting platform already paid for."""

    __tablename__ = "participant_erasures"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    erased_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # The researcher who erased them (null once that account is gone).
    erased_by: Mapped[int | None] = mapped_column(ForeignKey("researchers.id", ondelete="SET NULL"))
    outcome: Mapped[str] = mapped_column(String(32))  # as the participants list said
    arm: Mapped[str | None] = mapped_column(String(64))
    held_place: Mapped[bool] = mapped_column()
    answers: Mapped[int] = mapped_column()  # triplets deleted
    judgements: Mapped[int] = mapped_column()  # screens deleted
    practice_answers: Mapped[int] = mapped_column()
