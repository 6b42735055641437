from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.core.fields import RequestModel
from app.models import Split


class ItemOut(BaseModel):
    id: int
    key: str
    label: str | None
    text: str | None
    split: Split
    image_url: str | None = Field(
        description="Its file (an image, a sound or a video: see media_type), served with "
        "range requests"
    )
    media_type: str | None = Field(
        default=None, description='Its file\'s type ("image/png", "audio/mpeg", "video/mp4")'
    )
    clip_seconds: float | None = Field(
        default=None, description="A sound's or video's length, read on upload"
    )
    alt: str | None = Field(
        default=None, description="What a screen reader says for its file (null: its text)"
    )
    features: list[float] | None
    created_at: datetime
    answers: int | None = Field(
        default=None, description="Answers that name the item (in a list of items)"
    )


class ItemPage(BaseModel):
    items: list[ItemOut]
    total: int
    limit: int
    offset: int


class ItemUpdate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    label: str | None = Field(
        default=None,
        max_length=200,
        description="A new label; null takes it away (the item becomes unlabelled)",
    )
    split: Split | None = Field(
        default=None,
        strict=False,
        description="train, test or unlabelled; left out: unlabelled without a label, train "
        "for a newly labelled item, else as it was",
    )


class ItemDeletedOut(BaseModel):
    key: str
    answers_deleted: int = Field(description="Answers (triplets) that named the item, deleted")
    queries_withdrawn: int = Field(
        description="Queries served to raters or waiting that named it, withdrawn (the "
        "raters' answer counts stay)"
    )
