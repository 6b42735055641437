from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base
from app.models._types import Timestamp, string_enum, utcnow


class LabelType(StrEnum):
    """What an item's label is: a class name or a number (regression target)."""

    classification = "class"
    regression = "number"


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("researchers.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    label_type: Mapped[LabelType] = mapped_column(
        string_enum(LabelType, "label_type"), default=LabelType.classification
    )
    # Set by the first upload that carries feature vectors; later uploads must match it.
    feature_dim: Mapped[int | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
