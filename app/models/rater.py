from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base
from app.models._types import Timestamp, utcnow


class Rater(Base):
    """A person answering queries, known by the id their recruiting platform gave them."""

    __tablename__ = "raters"
    __table_args__ = (
        UniqueConstraint("project_id", "external_id", name="uq_raters_project_id_external_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(200))
    platform: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
