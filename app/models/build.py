from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, LargeBinary, SmallInteger, Text
from sqlalchemy.orm import Mapped, deferred, mapped_column

from app.core.db import Base
from app.models._types import JsonValue, Timestamp, string_enum, utcnow


class BuildStatus(StrEnum):
    running = "running"
    paused = "paused"
    cancelled = "cancelled"
    complete = "complete"


class Build(Base):
    """A CompRF forest built from raters' answers, node by node.

        `state` is the resumable builder (the library's own format); `items` maps its
        positions to item ids. `answers_cursor` is the id of the last triplet folded into the
        state, so a step after a crash reads exactly the answers it had not seen. `version`
        rises with every saved step: a step that lost a race saves nothing. `progress` is the
    builder's own report (queries answered and pending, share of each tree done).
    """

    __tablename__ = "builds"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[BuildStatus] = mapped_column(
        string_enum(BuildStatus, "build_status"), default=BuildStatus.running
    )
    params: Mapped[dict[str, Any]] = mapped_column(JsonValue, default=dict)
    state: Mapped[bytes] = deferred(mapped_column(LargeBinary, nullable=False))
    items: Mapped[bytes] = deferred(mapped_column(LargeBinary, nullable=False))
    answers_cursor: Mapped[int] = mapped_column(BigInteger, default=0)
    version: Mapped[int] = mapped_column(default=0)
    progress: Mapped[dict[str, Any]] = mapped_column(JsonValue, default=dict)
    message: Mapped[str] = mapped_column(Text, default="")
    # Up to this many of a node's items on one sorting screen (1: one triplet a screen).
    sort_size: Mapped[int] = mapped_column(SmallInteger, default=1, server_default="1")
    # The raters whose answers the state leaves out, as of its last replay: a finished
    # build is not replayed, so later exclusions show as a difference from this.
    excluded_rater_ids: Mapped[list[int]] = mapped_column(
        JsonValue, default=list, server_default="[]"
    )
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow, onupdate=utcnow)

    @property
    def queries_answered(self) -> int:
        """Distinct queries answered so far (from the last saved step's progress)."""
        return int(self.progress.get("queries_answered", 0))

    @property
    def queries_pending(self) -> int:
        """Queries the open nodes still wait for."""
        return int(self.progress.get("queries_pending", 0))
