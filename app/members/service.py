"""Who shares a project, in which role: members beside the owner, invited by a
single-use link for one email address (no mail server is assumed: the owner sends the
link), removed by the owner, or handed the project. What each role may do is in
app/auth/access.py; this module says who holds which."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Select, delete, select
from sqlalchemy.orm import Session

from app.core.db import rows_changed
from app.core.errors import Conflict, NotFound, ServiceError, Unprocessable
from app.models import Project, ProjectInvitation, ProjectMember, ProjectRole, Researcher
from app.models._types import utcnow

INVITATION_DAYS = 14
INVITED_ROLES = (ProjectRole.editor, ProjectRole.viewer)

# What each role is for, in the words the pages and the refusals use.
ROLE_SUMMARIES: dict[ProjectRole, str] = {
    ProjectRole.owner: "everything, including its members and deleting it",
    ProjectRole.editor: "everything but deleting the project and managing its members",
    ProjectRole.viewer: "its pages and exports, no changes",
}


class InvitationGone(ServiceError):
    """Used, revoked or expired: the link no longer joins anyone."""

    status_code = 410


@dataclass(frozen=True)
class Role:
    """A researcher's role in one project, and whether they see participants' ids."""

    role: ProjectRole
    sees_participants: bool


def role_in(*, session: Session, researcher: Researcher, project_id: int) -> Role | None:
    """The researcher's role in the project (an admin is an owner everywhere); None
    where they have none, or the project does not exist."""
    # The row the route's get_project reads next, from the session's identity map.
    project = session.get(Project, project_id)
    if project is None or project.importing:
        return None
    if researcher.is_admin or project.owner_id == researcher.id:
        return Role(ProjectRole.owner, True)
    member = _member(session, project_id, researcher.id)
    if member is None:
        return None
    return Role(member.role, _sees_participants(member))


def _sees_participants(member: ProjectMember) -> bool:
    """An editor always sees the participants' ids; a viewer where the owner allowed it."""
    return member.role == ProjectRole.editor or member.sees_participants


def is_member(*, session: Session, project_id: int, researcher: Researcher) -> bool:
    return _member(session, project_id, researcher.id) is not None


def shared_project_ids(*, session: Session, researcher: Researcher) -> Select[int]:
    """A subquery of the projects the researcher is a member of (not the owner)."""
    return select(ProjectMember.project_id).where(ProjectMember.researcher_id == researcher.id)


def _member(session: Session, project_id: int, researcher_id: int) -> ProjectMember | None:
    return session.scalar(
        select(ProjectMember).where(
            ProjectMember.project_id == project_id, ProjectMember.researcher_id == researcher_id
        )
    )


@dataclass(frozen=True)
class Member:
    researcher_id: int
    name: str
    email: str | None
    role: ProjectRole
    sees_participants: bool
    added_at: datetime | None


def members(*, session: Session, project: Project) -> list[Member]:
    """The owner first, then the members in the order they joined."""
    owner = session.get_one(Researcher, project.owner_id)
    found = [Member(owner.id, owner.name, owner.email, ProjectRole.owner, True, project.created_at)]
    rows = session.execute(
        select(ProjectMember, Researcher)
        .join(Researcher, Researcher.id == ProjectMember.researcher_id)
        .where(ProjectMember.project_id == project.id)
        .order_by(ProjectMember.added_at, ProjectMember.id)
    ).all()
    for member, researcher in rows:
        found.append(
            Member(
                researcher.id,
                researcher.name,
                researcher.email,
                member.role,
                _sees_participants(member),
                member.added_at,
            )
        )
    return found


def _role(value: str, field: str = "role") -> ProjectRole:
    if value not in [role.value for role in INVITED_ROLES]:
        raise Unprocessable(
            f"{field}: '{str(value)[:40]}' is not a member's role; give 'editor' "
            f"({ROLE_SUMMARIES[ProjectRole.editor]}) or 'viewer' "
            f"({ROLE_SUMMARIES[ProjectRole.viewer]})"
        )
    return ProjectRole(value)


def _secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def invite(
    *, session: Session, project: Project, invited_by: Researcher, email: str, role: str
) -> tuple[str, ProjectInvitation]:
    """A new invitation for `email` in `role`: (its secret, shown once, and its row)."""
    chosen = _role(role)
    already = session.scalar(select(Researcher).where(Researcher.email == email))
    if already is not None and (
        already.id == project.owner_id or _member(session, project.id, already.id) is not None
    ):
        raise Conflict(f"email: {email} is in this project already; change their role instead")
    secret = secrets.token_urlsafe(24)
    now = utcnow()
    row = ProjectInvitation(
        project_id=project.id,
        email=email,
        role=chosen,
        secret_hash=_secret_hash(secret),
        invited_by=invited_by.id,
        created_at=now,
        expires_at=now + timedelta(days=INVITATION_DAYS),
    )
    session.add(row)
    session.flush()
    return secret, row


def invitation_mail(
    *, project: Project, inviter: Researcher, role: ProjectRole, link: str
) -> tuple[str, str]:
    """The subject and text of the mail that carries an invitation."""
    subject = f"{inviter.name} invites you to the Closer project {project.name}"
    body = (
        f'{inviter.name} invites you to the project "{project.name}" on Closer, as '
        f"{role.value} ({ROLE_SUMMARIES[role]}).\n\n"
        f"Open this link to join (it works once, for this address, for {INVITATION_DAYS} "
        f"days):\n\n{link}\n\nYou sign in there, or make your account.\n"
    )
    return subject, body


def pending_invitations(*, session: Session, project: Project) -> list[ProjectInvitation]:
    now = utcnow()
    return [
        row
        for row in session.scalars(
            select(ProjectInvitation)
            .where(
                ProjectInvitation.project_id == project.id,
                ProjectInvitation.accepted_at.is_(None),
                ProjectInvitation.revoked_at.is_(None),
            )
            .order_by(ProjectInvitation.id)
        )
        if row.expires_at > now
    ]


def revoke_invitation(*, session: Session, project: Project, invitation_id: int) -> None:
    row = session.get(ProjectInvitation, invitation_id)
    if row is None or row.project_id != project.id:
        raise NotFound(f"no invitation {invitation_id} in this project")
    if row.accepted_at is None and row.revoked_at is None:
        row.revoked_at = utcnow()


def open_invitation(*, session: Session, secret: str) -> tuple[ProjectInvitation, Project]:
    """The invitation this secret opens, while it can still be used (410 after)."""
    row = session.scalar(
        select(ProjectInvitation).where(ProjectInvitation.secret_hash == _secret_hash(secret))
    )
    project = None if row is None else session.get(Project, row.project_id)
    if row is None or project is None:
        raise NotFound("no such invitation: check the link, or ask for a new one")
    if row.accepted_at is not None:
        raise InvitationGone("this invitation has been used: each link joins once")
    if row.revoked_at is not None:
        raise InvitationGone("this invitation was withdrawn: ask the project's owner for a new one")
    if row.expires_at <= utcnow():
        raise InvitationGone(
            f"this invitation expired on {row.expires_at:%Y-%m-%d}: ask the project's owner "
            "for a new one"
        )
    return row, project


def accept(*, session: Session, secret: str, researcher: Researcher) -> Project:
    """The researcher joins the invitation's project in its role; the link is used."""
    row, project = open_invitation(session=session, secret=secret)
    if (researcher.email or "").lower() != row.email:
        raise Unprocessable(
            f"this invitation is for {row.email}; you are signed in as "
            f"{researcher.email or researcher.name}: sign in with that address"
        )
    if researcher.id != project.owner_id and _member(session, project.id, researcher.id) is None:
        session.add(
            ProjectMember(
                project_id=project.id,
                researcher_id=researcher.id,
                role=row.role,
                added_by=row.invited_by,
            )
        )
    row.accepted_at, row.accepted_by = utcnow(), researcher.id
    session.flush()
    return project


def change_member(
    *,
    session: Session,
    project: Project,
    researcher_id: int,
    role: str | None = None,
    sees_participants: bool | None = None,
) -> ProjectMember:
    member = _member(session, project.id, researcher_id)
    if member is None:
        if researcher_id == project.owner_id:
            raise Unprocessable(
                "that is the owner: hand the project over (POST …/owner) to change who owns it"
            )
        raise NotFound(f"researcher {researcher_id} is not a member of this project")
    if role is not None:
        member.role = _role(role)
    if sees_participants is not None:
        member.sees_participants = sees_participants
    session.flush()
    return member


def remove_member(*, session: Session, project: Project, researcher_id: int) -> None:
    if researcher_id == project.owner_id:
        raise Unprocessable("the owner cannot be removed: hand the project over first")
    removed = rows_changed(
        session.execute(
            delete(ProjectMember).where(
                ProjectMember.project_id == project.id,
                ProjectMember.researcher_id == researcher_id,
            )
        )
    )
    if not removed:
        raise NotFound(f"researcher {researcher_id} is not a member of this project")


def hand_over(*, session: Session, project: Project, researcher_id: int) -> None:
    """A member becomes the owner; the owner stays on as an editor."""
    member = _member(session, project.id, researcher_id)
    if member is None:
        raise Unprocessable(
            f"researcher_id: {researcher_id} is not a member of this project; invite them first"
        )
    previous = project.owner_id
    session.delete(member)
    session.flush()
    project.owner_id = researcher_id
    session.add(
        ProjectMember(
            project_id=project.id,
            researcher_id=previous,
            role=ProjectRole.editor,
            added_by=researcher_id,
        )
    )
    session.flush()
