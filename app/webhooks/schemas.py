"""Webhooks as the API takes and shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.core.fields import RequestModel
from app.webhooks.service import EVENTS

_EVENTS = "; ".join(f"{name}: {words}" for name, words in EVENTS.items())


class WebhookCreate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=2000, description="Where deliveries are posted (http or https)")
    events: list[str] = Field(min_length=1, max_length=len(EVENTS), description=_EVENTS)
    secret: str | None = Field(
        default=None,
        max_length=200,
        description="Standard Webhooks' signing key ('whsec_' + base64); left out, one is made",
    )


class WebhookOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    url: str
    events: list[str]
    created_at: datetime


class WebhookCreated(WebhookOut):
    secret: str = Field(description="The signing key, shown this once")


class DeliveryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    event: str
    message_id: str = Field(description="Its webhook-id header, the same on every attempt")
    payload: dict[str, Any]
    created_at: datetime
    attempts: int
    delivered_at: datetime | None
    failed_at: datetime | None = Field(description="Given up after the last retry")
    next_attempt_at: datetime | None
    last_status: int | None
    last_error: str
    last_duration_ms: int | None
