from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, deferred, mapped_column

from app.core.db import Base
from app.models._types import JsonValue, Timestamp, registered_enum, string_enum, utcnow


class ModelKind(StrEnum):
    tripletboost = "tripletboost"
    tete = "tete"
    comprf = "comprf"
    smerf = "smerf"
    disdf = "disdf"
    choice = "choice"


class VersionStatus(StrEnum):
    queued = "queued"
    training = "training"
    ready = "ready"
    failed = "failed"
    cancelled = "cancelled"


class LearnedModel(Base):
    """A learner a researcher set up on a project: its kind, parameters and refit policy.

    Each fit is a `ModelVersion`; the newest ready one serves. Passive learners refit by
    themselves once the answers grew by `refit_growth` (a share) since the last fit.
    `inputs` holds what the researcher uploaded for it (a dissimilarity matrix for SMERF).
    """

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("project_id", "name", name="uq_models_project_id_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(100))
    kind: Mapped[ModelKind] = mapped_column(registered_enum(ModelKind))
    params: Mapped[dict[str, Any]] = mapped_column(JsonValue, default=dict)
    auto_refit: Mapped[bool] = mapped_column(default=True)
    refit_growth: Mapped[float] = mapped_column(default=0.2)
    min_answers: Mapped[int] = mapped_column(default=100)
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    # Fitted on the answers of this arm of the study only (null: every arm's).
    arm: Mapped[str | None] = mapped_column(String(64))
    inputs: Mapped[bytes | None] = deferred(mapped_column(LargeBinary))
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class ModelVersion(Base):
    """One fit of a model: what it was fitted on, how well it did, and the fitted artifact.

    `answers_cutoff` is the id of the last triplet the fit could read; `answers_count` the
    answers it used (excluded raters' answers left out), `heldout_count` those it kept
    back to measure the held-out triplet error in `metrics`.
    """

    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("model_id", "number", name="uq_model_versions_model_id_number"),
        Index("ix_model_versions_model_id_status", "model_id", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column()
    status: Mapped[VersionStatus] = mapped_column(
        string_enum(VersionStatus, "version_status"), default=VersionStatus.queued
    )
    trigger: Mapped[str] = mapped_column(String(20), default="manual")
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    params: Mapped[dict[str, Any]] = mapped_column(JsonValue, default=dict)
    answers_count: Mapped[int] = mapped_column(BigInteger, default=0)
    answers_cutoff: Mapped[int] = mapped_column(BigInteger, default=0)
    heldout_count: Mapped[int] = mapped_column(BigInteger, default=0)
    n_items: Mapped[int] = mapped_column(default=0)
    metrics: Mapped[dict[str, Any]] = mapped_column(JsonValue, default=dict)
    warm_start_from: Mapped[int | None] = mapped_column()
    artifact: Mapped[bytes | None] = deferred(mapped_column(LargeBinary))
    artifact_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    fitted_at: Mapped[datetime | None] = mapped_column(Timestamp)
