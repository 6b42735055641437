"""Column types and helpers shared by the tables."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from sqlalchemy import JSON, BigInteger, DateTime, Enum, Integer
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

from app.core.clock import utcnow  # noqa: F401 (the models' default timestamps)

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")
JsonValue = JSON().with_variant(JSONB(), "postgresql")


class UtcDateTime(TypeDecorator):
    """Aware UTC datetimes on both databases: SQLite keeps no zone, so store UTC and say so."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: give timestamps a zone")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None or value.tzinfo is not None:
            return value
        return value.replace(tzinfo=UTC)


Timestamp = UtcDateTime()


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
