"""A project's members and invitations as the API takes and shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.fields import RequestModel, RowId
from app.members.service import ROLE_SUMMARIES
from app.models import ProjectRole

_ROLES = "; ".join(
    f"{role.value}: {ROLE_SUMMARIES[role]}" for role in (ProjectRole.editor, ProjectRole.viewer)
)


class MemberOut(BaseModel):
    researcher_id: int
    name: str
    email: str | None
    role: ProjectRole
    sees_participants: bool = Field(description="Whether they see the participants' ids")
    added_at: datetime | None


class MemberChange(RequestModel):
    model_config = ConfigDict(extra="forbid")

    role: str | None = Field(default=None, description=f"Their new role ({_ROLES})")
    sees_participants: bool | None = Field(
        default=None, description="A viewer may see the participants' platform ids"
    )


class InvitationCreate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    email: str = Field(max_length=254, description="Who is invited: the link joins them only")
    role: str = Field(description=f"The role they join in ({_ROLES})")


class InvitationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    email: str
    role: ProjectRole
    created_at: datetime
    expires_at: datetime


class InvitationCreated(InvitationOut):
    link: str = Field(description="The single-use link to send them (shown once)")
    mailed: bool = Field(description="Whether it was mailed to them (CLOSER_SMTP_HOST set)")
    mail_error: str | None = Field(
        default=None, description="Why mailing it failed, where it was tried: send it yourself"
    )


class OwnerChange(RequestModel):
    model_config = ConfigDict(extra="forbid")

    researcher_id: RowId = Field(description="The member who becomes the owner")


class Joined(BaseModel):
    project_id: int
    name: str
    role: ProjectRole
    status: Literal["joined"] = "joined"
