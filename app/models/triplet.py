from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, false, func, text
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base
from app.formats import JudgementFormat
from app.models._types import BigId, FormatName, JsonValue, Timestamp, string_enum, utcnow


class TripletSource(StrEnum):
    upload = "upload"
    rater = "rater"
    oracle = "oracle"


class UploadKind(StrEnum):
    items = "items"
    triplets = "triplets"


class Triplet(Base):
    """One answer: `anchor` is closer to `closer` than to `farther`.

    The table is an append-only log that reaches millions of rows per project. Its
    references (project, items, rater, upload) are resolved by the services that write
    it, not by foreign-key triggers: PostgreSQL checks those row by row, which cut bulk
    ingest from ~430k to ~76k rows/s. Deleting a project deletes its triplets explicitly.
    """

    __tablename__ = "triplets"
    __table_args__ = (
        Index("ix_triplets_project_id_id", "project_id", "id"),
        # A rater's answer times, read from the index alone (the raters' table).
        Index(
            "ix_triplets_rater_id_response_time_ms",
            "rater_id",
            "response_time_ms",
            postgresql_where=text("rater_id IS NOT NULL"),
            sqlite_where=text("rater_id IS NOT NULL"),
        ),
        # The researcher's test split, found without reading the rest of the log.
        Index(
            "ix_triplets_test_split",
            "project_id",
            "id",
            postgresql_where=text("is_test"),
            sqlite_where=text("is_test"),
        ),
        # Answers to adaptively chosen questions: a fit reads their ids alone.
        Index(
            "ix_triplets_project_id_adaptive",
            "project_id",
            "id",
            postgresql_where=text("adaptive"),
            sqlite_where=text("adaptive"),
        ),
        # Answers derived from a judgement, with its id: a fit reads them alone.
        Index(
            "ix_triplets_project_id_judged",
            "project_id",
            "id",
            "judgement_id",
            postgresql_where=text("judgement_id IS NOT NULL"),
            sqlite_where=text("judgement_id IS NOT NULL"),
        ),
        Index(
            "uq_triplets_project_id_idempotency_key",
            "project_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
            sqlite_where=text("idempotency_key IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(Integer)
    anchor_id: Mapped[int] = mapped_column(BigId)
    closer_id: Mapped[int] = mapped_column(BigId)
    farther_id: Mapped[int] = mapped_column(BigId)
    source: Mapped[TripletSource] = mapped_column(string_enum(TripletSource, "triplet_source"))
    rater_id: Mapped[int | None] = mapped_column(Integer)
    query_id: Mapped[int | None] = mapped_column(BigId)
    upload_id: Mapped[int | None] = mapped_column(Integer)
    idempotency_key: Mapped[str | None] = mapped_column(String(100))
    response_time_ms: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(
        Timestamp, default=utcnow, server_default=func.current_timestamp()
    )
    # Uploaded as the researcher's test split: never fitted, every model measured on it.
    is_test: Mapped[bool] = mapped_column(server_default=false())
    # An answer to a question chosen for what it would teach (ADAPTIVE_PURPOSES): such
    # questions lean towards hard ones, so held-out errors are measured on the others.
    adaptive: Mapped[bool] = mapped_column(server_default=false())
    # The judgement (one screen answered) this triplet was derived from, if any: the
    # triplets of one judgement stay on one side of every held-out split.
    judgement_id: Mapped[int | None] = mapped_column(BigId)
    # A rater's answer: the arm they were in, and the design version that asked it.
    arm: Mapped[str | None] = mapped_column(String(64))
    design_version: Mapped[int | None] = mapped_column(Integer)


class Judgement(Base):
    """One screen a person answered (or an uploaded row of a judgement file), kept as
    shown and as answered; the triplets it implies are stored with its id.

    `context` holds the items the question is about, by format: [] (odd-one-out), [the
    reference] (rank; a triplet's anchor), [left pivot, right pivot] (sort). `shown`
    holds the items to choose among in display order; `chosen` what was chosen: [the odd
    one], [the picks, first first], one of "left"/"right"/"cant_tell" per shown item
    (sort), [the closer one] (triplet). Item ids throughout."""

    __tablename__ = "judgements"
    __table_args__ = (
        Index("ix_judgements_project_id_id", "project_id", "id"),
        # The screens answered more than once, found from the index alone.
        Index("ix_judgements_project_id_screen", "project_id", "screen", "rater_id"),
        # An upload's judgements: taken out with it, named on the uploads page.
        Index(
            "ix_judgements_upload_id",
            "upload_id",
            postgresql_where=text("upload_id IS NOT NULL"),
            sqlite_where=text("upload_id IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(Integer)
    format: Mapped[JudgementFormat] = mapped_column(FormatName())
    context: Mapped[list] = mapped_column(JsonValue, default=list)
    shown: Mapped[list] = mapped_column(JsonValue)
    chosen: Mapped[list] = mapped_column(JsonValue)
    rater_id: Mapped[int | None] = mapped_column(Integer)
    upload_id: Mapped[int | None] = mapped_column(Integer)
    response_time_ms: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(
        Timestamp, default=utcnow, server_default=func.current_timestamp()
    )
    arm: Mapped[str | None] = mapped_column(String(64))
    design_version: Mapped[int | None] = mapped_column(Integer)
    # The screen it answered (`JudgementFormat.screen_of`): answers of several people to
    # one screen share it (the noise ceiling sets them against each other).
    screen: Mapped[int | None] = mapped_column(BigInteger)


class Upload(Base):
    """One accepted upload; its idempotency key makes a retried upload a no-op.

    A triplet upload commits its rows in chunks, so answers get through while it runs
    (SQLite has one writer at a time). Until it is published (`pending` false) its rows
    are read by nobody: see app/triplets/log.py."""

    __tablename__ = "uploads"
    __table_args__ = (
        Index(
            "uq_uploads_project_id_idempotency_key",
            "project_id",
            "idempotency_key",
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
            sqlite_where=text("idempotency_key IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[UploadKind] = mapped_column(string_enum(UploadKind, "upload_kind"))
    filename: Mapped[str] = mapped_column(String(255), default="")
    idempotency_key: Mapped[str | None] = mapped_column(String(100))
    # The SHA-256 of the request that made it (file and options): a retry with the same
    # key and another body is refused rather than answered with this upload.
    body_digest: Mapped[str | None] = mapped_column(String(64))
    row_count: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    pending: Mapped[bool] = mapped_column(default=False, server_default=false())
    # At most the smallest id of its rows: ordered reads of the log stop below it.
    first_triplet_id: Mapped[int | None] = mapped_column(BigId)
    # Its last committed chunk: an upload silent for long died with its process.
    touched_at: Mapped[datetime | None] = mapped_column(Timestamp)
