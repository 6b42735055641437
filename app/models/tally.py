from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base
from app.models._types import BigId, Timestamp


class AnswerTally(Base):
    """How many answers of a source a project received in an hour (UTC), for the
    workspace's counts and charts: summing a week of these reads a few hundred rows
    where counting the answers themselves reads millions. Kept by the worker up to the
    project's cursor below; answers after it are counted live."""

    __tablename__ = "answer_tallies"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    hour: Mapped[datetime] = mapped_column(Timestamp, primary_key=True)
    source: Mapped[str] = mapped_column(String(16), primary_key=True)
    answers: Mapped[int] = mapped_column(BigInteger, default=0)


class AnswerTallyCursor(Base):
    """The last triplet id of the project the tallies count (every one up to it)."""

    __tablename__ = "answer_tally_cursors"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    through_id: Mapped[int] = mapped_column(BigId, default=0)
