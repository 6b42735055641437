"""What the API says of a study's design versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class DesignVersionOut(BaseModel):
    """One version of what the study's raters see; every answer records its number."""

    model_config = ConfigDict(from_attributes=True)

    number: int
    current: bool = Field(description="The version asking raters now")
    locked: bool = Field(description="It has collected an answer: a change makes a new one")
    created_at: datetime
    locked_at: datetime | None = Field(description="When its first answer came")
    changes: list[str] = Field(description="What changed from the version before")
    design: dict[str, Any] = Field(
        description="What raters see: the path, texts, formats, arms, and the items (their "
        "count and a digest of their keys, texts and images)"
    )
