"""The one clock: aware UTC datetimes, as every table stores them."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
