"""A project's members beside its owner (project_members) and the invitations that
make them (project_invitations): a lab shares a project with its PI, students and
research assistants, each with a role."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base
from app.models._types import Timestamp, string_enum, utcnow


class ProjectRole(StrEnum):
    """What a researcher is to a project (app/auth/access.py says what each may do). The
    owner is the project's `owner_id`; editors and viewers are its members."""

    owner = "owner"
    editor = "editor"
    viewer = "viewer"


class ProjectMember(Base):
    __tablename__ = "project_members"
    __table_args__ = (UniqueConstraint("project_id", "researcher_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    researcher_id: Mapped[int] = mapped_column(
        ForeignKey("researchers.id", ondelete="CASCADE"), index=True
    )
    role: Mapped[ProjectRole] = mapped_column(string_enum(ProjectRole, "member_role"))
    # A viewer sees the participants' platform ids only where the owner allows it.
    sees_participants: Mapped[bool] = mapped_column(default=False)
    added_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    added_by: Mapped[int | None] = mapped_column(ForeignKey("researchers.id", ondelete="SET NULL"))


class ProjectInvitation(Base):
    """A single-use link to join a project in a role, for one email address; stored
    only as the SHA-256 of its secret."""

    __tablename__ = "project_invitations"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    email: Mapped[str] = mapped_column(String(254))
    role: Mapped[ProjectRole] = mapped_column(string_enum(ProjectRole, "invitation_role"))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    invited_by: Mapped[int | None] = mapped_column(
        ForeignKey("researchers.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(Timestamp)
    accepted_at: Mapped[datetime | None] = mapped_column(Timestamp)
    accepted_by: Mapped[int | None] = mapped_column(
        ForeignKey("researchers.id", ondelete="SET NULL")
    )
    revoked_at: Mapped[datetime | None] = mapped_column(Timestamp)
