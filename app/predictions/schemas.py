from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.builds.schemas import RoutingOut
from app.core.fields import JSONTuple, RequestModel, RowId


class NewItem(RequestModel):
    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(default=None, max_length=200, description="Your name for it, echoed")
    triplets: list[JSONTuple[str, str]] | None = Field(
        default=None,
        max_length=100_000,
        description="TripletBoost, t-ETE: [closer key, farther key] pairs: the new item is "
        "closer to the first known item than to the second",
    )
    features: list[float] | None = Field(
        default=None, max_length=100_000, description="SMERF, DisDF: the item's feature vector"
    )


class PredictRequest(RequestModel):
    model_config = ConfigDict(extra="forbid")

    items: list[str] | None = Field(
        default=None, max_length=100_000, description="Keys of items in the project"
    )
    new_items: list[NewItem] | None = Field(
        default=None, max_length=10_000, description="Items not in the project"
    )
    version: RowId | None = Field(default=None, description="Default: the newest ready")
    ask_raters: bool = Field(
        default=True,
        description="CompRF: put the routing queries in the raters' queue; false: the "
        "client answers them (GET …/predictions/{id}/queries, POST …/answers)",
    )


class PredictedItem(BaseModel):
    key: str
    label: str | None = Field(
        description="None where nothing the model knows speaks for it, or where the top "
        "classes tie (see tied)"
    )
    tied: list[str] | None = Field(
        default=None,
        description="The classes that share the top, where two or more do: a tie is "
        "reported as a tie, never as whichever class sorts first",
    )
    probabilities: dict[str, float] | None
    support: int = Field(
        description="Evidence behind it: TripletBoost's voting pairs, neighbours, levels"
    )
    known: bool = Field(description="The item is in the project (else given in new_items)")
    coordinates: list[float] | None = Field(
        default=None, description="t-ETE: where a new item was placed"
    )


class PredictOut(BaseModel):
    model_id: int
    version: int
    kind: str
    predictions: list[PredictedItem]


class RoutingStarted(BaseModel):
    """CompRF predicts by routing: the answer comes when the routing queries are answered."""

    model_id: int
    version: int
    kind: Literal["comprf"] = "comprf"
    routing: RoutingOut
    poll: str = Field(description="GET this until its status is complete")


class DistancesRequest(RequestModel):
    model_config = ConfigDict(extra="forbid")

    pairs: list[JSONTuple[str, str]] = Field(min_length=1, max_length=100_000)
    version: RowId | None = Field(default=None)


class DistancesOut(BaseModel):
    model_id: int
    version: int
    distances: list[float]


class Neighbor(BaseModel):
    key: str
    distance: float


class NeighborsOut(BaseModel):
    model_id: int
    version: int
    item: str
    neighbors: list[Neighbor]


class ScreenIn(RequestModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["odd_one_out", "rank", "triplet"] = Field(
        description="odd_one_out: three items, no reference; rank: a reference and the items "
        "to pick from; triplet: a reference and its two candidates"
    )
    items: list[str] = Field(min_length=2, max_length=12, description="Item keys, as shown")
    reference: str | None = Field(default=None, description="The reference's key (rank, triplet)")
    picks: int = Field(default=1, ge=1, le=11, description="How many items the screen picks")


class ChoicesRequest(RequestModel):
    model_config = ConfigDict(extra="forbid")

    screens: list[ScreenIn] = Field(min_length=1, max_length=10_000)
    version: RowId | None = Field(default=None)


class ScreenChoices(BaseModel):
    probabilities: dict[str, float] = Field(
        description="Each item's probability of being chosen: the odd one, the first pick of "
        "a rank screen, the closer of a triplet's two"
    )


class ChoicesOut(BaseModel):
    model_id: int
    version: int
    screens: list[ScreenChoices]
