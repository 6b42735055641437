from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.core.fields import RequestModel


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
