"""A project's webhooks (webhooks) and each event's delivery to each of them
(webhook_deliveries): written when the worker finds the event, in the same transaction as
its marker, so an event is delivered at least once whatever crashes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base
from app.models._types import JsonValue, Timestamp, utcnow


class Webhook(Base):
    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    url: Mapped[str] = mapped_column(String(2000))
    # Standard Webhooks' "whsec_" + base64 key: the receiver checks signatures with it.
    secret: Mapped[str] = mapped_column(String(200))
    events: Mapped[list[str]] = mapped_column(JsonValue, default=list)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    created_by: Mapped[int | None] = mapped_column(
        ForeignKey("researchers.id", ondelete="SET NULL")
    )


class WebhookDelivery(Base):
    """One event for one webhook: its message (sent the same on every attempt, with the
    same webhook-id), and how its attempts went."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (UniqueConstraint("webhook_id", "event", "subject"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    webhook_id: Mapped[int] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), index=True
    )
    event: Mapped[str] = mapped_column(String(40))
    # What the event is about (a rater's, build's or model version's id; a study's quota).
    subject: Mapped[str] = mapped_column(String(64))
    message_id: Mapped[str] = mapped_column(String(64), unique=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JsonValue)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # When the next attempt is due, or a claimed attempt's lease ends; None: done.
    next_attempt_at: Mapped[datetime | None] = mapped_column(Timestamp, index=True)
    attempts: Mapped[int] = mapped_column(default=0)
    delivered_at: Mapped[datetime | None] = mapped_column(Timestamp)
    failed_at: Mapped[datetime | None] = mapped_column(Timestamp)
    last_status: Mapped[int | None] = mapped_column()
    last_error: Mapped[str] = mapped_column(Text, default="")
    last_duration_ms: Mapped[int | None] = mapped_column()
