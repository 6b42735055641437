from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Float, ForeignKey, Index, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base
from app.models._types import BigId, Timestamp, string_enum, utcnow


class Split(StrEnum):
    train = "train"
    test = "test"
    unlabelled = "unlabelled"


class Item(Base):
    """One thing raters compare: an image, a sound or a video, a text, or a file and a
    text, with optional label and features."""

    __tablename__ = "items"
    __table_args__ = (
        UniqueConstraint("project_id", "key", name="uq_items_project_id_key"),
        # A project's items in upload order: the items page and API page through 50,000
        # by walking this index, not the table.
        Index("ix_items_project_id_id", "project_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    label: Mapped[str | None] = mapped_column(String(200))
    text: Mapped[str | None] = mapped_column(Text)
    # Its file, content-addressed under the media folder ("<sha256>.<ext>"): an image, or a
    # sound or video (its type says which: app/items/media.py), with the clip's length.
    image_file: Mapped[str | None] = mapped_column(String(80))
    image_type: Mapped[str | None] = mapped_column(String(40))
    clip_seconds: Mapped[float | None] = mapped_column(Float)
    # What a screen reader says for its file (null: its text, else its key).
    alt: Mapped[str | None] = mapped_column(Text)
    # float64 little-endian bytes; the length is the project's feature_dim.
    features: Mapped[bytes | None] = mapped_column(LargeBinary)
    split: Mapped[Split] = mapped_column(string_enum(Split, "item_split"), default=Split.unlabelled)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
