"""Column types and helpers shared by the tables."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from sqlalchemy import JSON, BigInteger, DateTime, Enum, Integer
from sqlalchemy.dialects.postgresql import JSONB

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")
JsonValue = JSON().with_variant(JSONB(), "postgresql")
Timestamp = DateTime(timezone=True)


def utcnow() -> datetime:
    return datetime.now(UTC)


def string_enum(enum: type[StrEnum], name: str) -> Enum:
    """A VARCHAR with a CHECK constraint, stored as the enum's values on both databases."""
    return Enum(
        enum,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=max(len(member.value) for member in enum),
        values_callable=lambda members: [member.value for member in members],
        validate_strings=True,
    )
