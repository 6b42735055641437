from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.models import BuildStatus


class BuildCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n_trees: int = Field(default=100, ge=1, le=1000)
    leaf_size: int = Field(default=1, ge=1, description="A node this small becomes a leaf")
    subsample: float = Field(default=1.0, gt=0, le=1, description="Share of items per tree")
    answers_per_query: int = Field(
        default=1, ge=1, le=15, description="Answers gathered per query; the majority decides"
    )
    random_state: int | None = Field(
        default=None, ge=0, description="Seed, for a reproducible build"
    )


class BuildProgress(BaseModel):
    queries_answered: int = 0
    queries_pending: int = 0
    nodes_open: int = 0
    nodes_done: int = 0
    done_share: float = Field(default=0.0, description="Share of items in leaves, all trees")
    tree_done_share: list[float] = Field(default_factory=list, description="The same per tree")


class BuildOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    project_id: int
    status: BuildStatus
    params: dict[str, Any]
    progress: BuildProgress
    message: str
    created_at: datetime
    updated_at: datetime


class PendingQuery(BaseModel):
    anchor: str
    left: str
    right: str
    needed: int = Field(description="Answers it still needs")
