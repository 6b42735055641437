from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from app.models import Split


class ItemOut(BaseModel):
    id: int
    key: str
    label: str | None
    text: str | None
    split: Split
    image_url: str | None
    features: list[float] | None
    created_at: datetime


class ItemPage(BaseModel):
    items: list[ItemOut]
    total: int
    limit: int
    offset: int
