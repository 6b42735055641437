from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.core.fields import INT4_MAX, JSONTuple, RequestModel
from app.models import BuildStatus, RoutingStatus
from app.scheduling.sorting import MOST_SORTED


class BuildCreate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    n_trees: int = Field(default=100, ge=1, le=1000)
    leaf_size: int = Field(
        default=1, ge=1, le=INT4_MAX, description="A node this small becomes a leaf"
    )
    subsample: float = Field(default=1.0, gt=0, le=1, description="Share of items per tree")
    answers_per_query: int = Field(
        default=1, ge=1, le=15, description="Answers gathered per query; the majority decides"
    )
    random_state: int | None = Field(
        default=None, ge=0, le=INT4_MAX, description="Seed, for a reproducible build"
    )
    sort_size: int = Field(
        default=1,
        ge=1,
        le=MOST_SORTED,
        description="Items of a node asked on one sorting screen, beside its two pivots "
        "(1: one triplet per screen). The trees are the same; a screen asks up to this many "
        "queries at once",
    )


class BuildProgress(BaseModel):
    queries_answered: int = 0
    queries_pending: int = Field(default=0, description="Queries the open nodes ask now")
    answers_needed_estimate: int = Field(
        default=0,
        description="Answers the build still needs to complete, estimated: the open nodes' "
        "own, and what their subtrees are expected to ask (offline on digits: within 5% at the "
        "start, within 20% later on)",
    )
    nodes_open: int = 0
    nodes_done: int = 0
    done_share: float = Field(default=0.0, description="Share of items in leaves, all trees")
    tree_done_share: list[float] = Field(default_factory=list, description="The same per tree")


class ExclusionChangeOut(BaseModel):
    excluded: list[int] = Field(
        description="Raters excluded since the build finished: their answers are in its trees"
    )
    included: list[int] = Field(
        description="Raters included again since it finished: it left their answers out"
    )
    answers: int = Field(description="Answers of those raters among those the build read")


class BuildOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    project_id: int
    number: int = Field(
        default=0, description="Which of its project's builds it is (1 for the first)"
    )
    status: BuildStatus
    params: dict[str, Any]
    progress: BuildProgress
    message: str
    created_at: datetime
    updated_at: datetime
    exclusions_since: ExclusionChangeOut | None = Field(
        default=None,
        description="A finished build is not replayed when raters are excluded or included "
        "again: how they changed since (POST .../rebuild builds it again without them); "
        "null while nothing changed, and for running or paused builds, which follow",
    )


class PendingQuery(BaseModel):
    anchor: str
    left: str
    right: str
    needed: int = Field(description="Answers it still needs")


class RoutingCreate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    items: list[str] | None = Field(
        default=None,
        max_length=100_000,
        description="Item keys to classify; default: every test and unlabelled item",
    )
    ask_raters: bool = Field(
        default=True,
        description="Put the routing queries in the raters' queue (first in its order); "
        "false: the client answers them itself (GET .../queries, POST .../answers)",
    )


class RoutingProgress(BaseModel):
    queries_pending: int = 0
    items: int = 0
    items_done: int = 0


class ItemPrediction(BaseModel):
    label: str | None = Field(
        description="The class with the largest share of the trees' leaves; null where "
        "classes tie for it (see tied)"
    )
    tied: list[str] | None = Field(
        default=None, description="The classes sharing the top share, where they tie"
    )
    proba: dict[str, float]


class RoutingOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    project_id: int
    build_id: int
    status: RoutingStatus
    ask_raters: bool
    progress: RoutingProgress
    result: dict[str, ItemPrediction] | None = Field(
        description="Per item key, once every item reached a leaf in every tree"
    )
    created_at: datetime
    updated_at: datetime


class RoutingAnswers(RequestModel):
    model_config = ConfigDict(extra="forbid")

    answers: list[JSONTuple[str, str, str]] = Field(
        min_length=1,
        max_length=100_000,
        description="[anchor, closer, farther] by item key: the anchor is closer to `closer`",
    )


class AgainEstimateOut(BaseModel):
    answers: int = Field(
        description="Answers the new build still needs once it has folded the answers that "
        "count now (its progress's estimate, as a running build shows it)"
    )
    answers_per_hour: float | None = Field(description="The project's recent answer rate")
    hours: float | None = Field(description="The answers at that rate (null: no recent rate)")


class BuildEstimateOut(BaseModel):
    items: int = Field(description="Labelled items outside the test split")
    items_per_tree: int
    queries: int = Field(description="Queries the trees are expected to ask")
    answers: int = Field(
        description="Answers those take (queries x answers per query); answers already held "
        "for the same queries are used first, so this is what it asks at most"
    )
    answers_per_hour: float | None = Field(description="The project's recent answer rate")
    hours: float | None = Field(description="The answers at that rate (null: no recent rate)")
    screens: int = Field(
        default=0,
        description="Screens raters answer for them: the answers, or with sort_size > 1 the "
        "sorting screens (a node's items that many at a time; raters answering at once "
        "share a node's items over a few more)",
    )
