from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.models import LabelType


class ProjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    label_type: LabelType = Field(
        default=LabelType.classification,
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
