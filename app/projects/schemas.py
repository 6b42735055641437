from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.core.fields import INT4_MAX, RequestModel
from app.models import LabelType


class ProjectCreate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    label_type: LabelType = Field(
        default=LabelType.classification,
        strict=False,
        description="'class' when labels name classes, 'number' when they are numeric targets.",
    )


class ProjectOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    description: str
    label_type: LabelType
    feature_dim: int | None
    created_at: datetime


class ProjectDetail(ProjectOut):
    item_count: int
    triplet_count: int


class RatingSettings(BaseModel):
    """How the project's public rating link behaves."""

    model_config = ConfigDict(from_attributes=True, extra="forbid")

    instructions: str = Field(default="", max_length=20_000, description="Shown before rating")
    question: str = Field(
        default="Which of the two is closer to the one on top?", min_length=1, max_length=300
    )
    allow_cant_tell: bool = Field(default=False, description='Offer a "can\'t tell" answer')
    answers_per_rater: int = Field(
        default=40, ge=0, le=100_000, description="Answers that complete a session (0: no limit)"
    )
    completion_code: str = Field(min_length=1, max_length=64, description="Shown when done")
    completion_url: str | None = Field(
        default=None,
        max_length=500,
        pattern=r"^https?://",
        description="Where a finished rater is sent back to (the recruiting platform)",
    )
    no_more_work_code: str | None = Field(
        default=None,
        max_length=64,
        description="Shown to a rater who ends early because nothing is left to ask them "
        "(they have seen every query the study has); null: the completion code",
    )
    no_more_work_url: str | None = Field(
        default=None,
        max_length=500,
        pattern=r"^https?://",
        description="Where such a rater is sent; null: completion_url",
    )
    random_share: float = Field(
        default=0.1, ge=0, le=1, description="Share of random triplets for the passive learners"
    )
    attention_rate: float = Field(
        default=0.05, ge=0, le=1, description="Share of attention checks (known answers)"
    )
    labelling_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Of the questions the samplers propose (after CompRF's needs), the share "
        "that decides wanted labels; all three shares null: chosen from the project's models "
        "and items",
    )
    embedding_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Of the samplers' questions, the share asked where the embedding is least sure",
    )
    placement_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Of the samplers' questions, the share that places items new to the embedding",
    )
    lease_seconds: int = Field(
        default=120, ge=5, le=86_400, description="How long a served query stays reserved"
    )
    min_attention_accuracy: float | None = Field(
        default=None, ge=0, le=1, description="Exclude raters passing fewer checks than this"
    )
    min_majority_agreement: float | None = Field(
        default=None, ge=0, le=1, description="Exclude raters agreeing less with the majority"
    )
    quality_min_answers: int = Field(
        default=5, ge=1, description="Checks (or compared answers) before a threshold applies"
    )


class RatingSettingsUpdate(RequestModel):
    """Any subset of the rating settings."""

    model_config = ConfigDict(extra="forbid")

    instructions: str | None = Field(default=None, max_length=20_000)
    question: str | None = Field(default=None, min_length=1, max_length=300)
    allow_cant_tell: bool | None = None
    answers_per_rater: int | None = Field(default=None, ge=0, le=100_000)
    completion_code: str | None = Field(default=None, min_length=1, max_length=64)
    completion_url: str | None = Field(default=None, max_length=500, pattern=r"^https?://")
    no_more_work_code: str | None = Field(default=None, min_length=1, max_length=64)
    no_more_work_url: str | None = Field(default=None, max_length=500, pattern=r"^https?://")
    random_share: float | None = Field(default=None, ge=0, le=1)
    attention_rate: float | None = Field(default=None, ge=0, le=1)
    labelling_share: float | None = Field(default=None, ge=0, le=1)
    embedding_share: float | None = Field(default=None, ge=0, le=1)
    placement_share: float | None = Field(default=None, ge=0, le=1)
    lease_seconds: int | None = Field(default=None, ge=5, le=86_400)
    min_attention_accuracy: float | None = Field(default=None, ge=0, le=1)
    min_majority_agreement: float | None = Field(default=None, ge=0, le=1)
    quality_min_answers: int | None = Field(default=None, ge=1, le=INT4_MAX)


class RatingOut(RatingSettings):
    public_slug: str
    public_url: str = Field(description="The link to share with raters (add ?PROLIFIC_PID=… etc.)")
