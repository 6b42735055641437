"""Column types and helpers shared by the tables."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from sqlalchemy import JSON, BigInteger, DateTime, Enum, Integer, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

from app.core.clock import utcnow  # noqa: F401 (the models' default timestamps)
from app.formats import JudgementFormat, named

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


class FormatName(TypeDecorator):
    """A judgement format (app/formats), stored by its name. No CHECK constraint: the
    registry is the list of formats, so a format is added by writing its module."""

    impl = String(32)
    cache_ok = True

    def process_bind_param(self, value: str | JudgementFormat | None, dialect) -> str | None:
        return None if value is None else named(value).name

    def process_result_value(self, value: str | None, dialect) -> JudgementFormat | None:
        return None if value is None else named(value)


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


def registered_enum(enum: type[StrEnum], length: int = 32) -> Enum:
    """A VARCHAR stored as the enum's values, with no CHECK constraint: the code keeps
    the list (the learner kinds' registry, app/training/kinds), so a new member is its
    module, not a migration."""
    return Enum(
        enum,
        native_enum=False,
        create_constraint=False,
        length=length,
        values_callable=lambda members: [member.value for member in members],
        validate_strings=True,
    )
