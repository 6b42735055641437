"""A project's members over REST: who shares it in which role, invitations by a
single-use link, role changes, removal and handing the project over (the owner's), and
joining by an invitation's link."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from app.auth.deps import ManagingAccount, ManagingMembers, Viewing
from app.auth.service import normalise_email
from app.core import mail
from app.core.deps import SessionDep, public_base_url
from app.core.errors import Unprocessable
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.members import service
from app.members.schemas import (
    InvitationCreate,
    InvitationCreated,
    InvitationOut,
    Joined,
    MemberChange,
    MemberOut,
    OwnerChange,
)
from app.models import Project, ProjectInvitation, Researcher
from app.projects.service import get_project

router = APIRouter(prefix="/projects/{project_id}", tags=["members"], route_class=StrictJSONRoute)
joining = APIRouter(prefix="/invitations", tags=["members"], route_class=StrictJSONRoute)


def invitation_link(request: Request, secret: str) -> str:
    return public_base_url(request) + request.app.url_path_for("invitation_page", secret=secret)


def _members(session, project) -> list[MemberOut]:
    return [
        MemberOut(**vars(member)) for member in service.members(session=session, project=project)
    ]


@router.get("/members", response_model=list[MemberOut])
def list_members(project_id: RowId, session: SessionDep, researcher: Viewing):
    """Who shares the project: the owner first, then each member in the order they joined."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return _members(session, project)


@router.patch("/members/{researcher_id}", response_model=list[MemberOut])
def change_member(
    project_id: RowId,
    researcher_id: RowId,
    body: MemberChange,
    session: SessionDep,
    researcher: ManagingMembers,
):
    """A member's role, or whether a viewer sees the participants' ids."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    service.change_member(
        session=session,
        project=project,
        researcher_id=researcher_id,
        role=body.role,
        sees_participants=body.sees_participants,
    )
    return _members(session, project)


@router.delete("/members/{researcher_id}", status_code=status.HTTP_204_NO_CONTENT)
def remove_member(
    project_id: RowId, researcher_id: RowId, session: SessionDep, researcher: ManagingMembers
) -> Response:
    """The member loses the project at once (their tokens and browsers with it)."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    service.remove_member(session=session, project=project, researcher_id=researcher_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/owner", response_model=list[MemberOut])
def hand_over(
    project_id: RowId, body: OwnerChange, session: SessionDep, researcher: ManagingMembers
):
    """A member becomes the project's owner; the owner stays on as an editor."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    service.hand_over(session=session, project=project, researcher_id=body.researcher_id)
    return _members(session, project)


@router.post("/invitations", status_code=status.HTTP_201_CREATED, response_model=InvitationCreated)
def invite(
    project_id: RowId,
    body: InvitationCreate,
    request: Request,
    response: Response,
    session: SessionDep,
    researcher: ManagingMembers,
):
    """A single-use link that joins this email address to the project in the role, for 14
    days: send it to them (it is shown this once)."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    try:
        email = normalise_email(body.email)
    except Exception as refused:
        raise Unprocessable(f"email: {refused}") from None
    secret, row = service.invite(
        session=session, project=project, invited_by=researcher, email=email, role=body.role
    )
    link = invitation_link(request, secret)
    mailed, mail_error = mail_invitation(request, project, researcher, row, link)
    response.headers["Cache-Control"] = "no-store"
    return InvitationCreated(
        **InvitationOut.model_validate(row).model_dump(),
        link=link,
        mailed=mailed,
        mail_error=mail_error,
    )


def mail_invitation(
    request: Request, project: Project, inviter: Researcher, row: ProjectInvitation, link: str
) -> tuple[bool, str | None]:
    """(mailed, why not): mailed where a mail server is configured; else not tried."""
    settings = request.app.state.settings
    if not mail.can_mail(settings):
        return False, None
    subject, body = service.invitation_mail(
        project=project, inviter=inviter, role=row.role, link=link
    )
    failed = mail.send(settings, to=row.email, subject=subject, body=body)
    return failed is None, failed


@router.get("/invitations", response_model=list[InvitationOut])
def list_invitations(project_id: RowId, session: SessionDep, researcher: ManagingMembers):
    """The invitations not yet used, withdrawn or expired."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return service.pending_invitations(session=session, project=project)


@router.delete("/invitations/{invitation_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_invitation(
    project_id: RowId, invitation_id: RowId, session: SessionDep, researcher: ManagingMembers
) -> Response:
    """The link joins nobody from now on."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    service.revoke_invitation(session=session, project=project, invitation_id=invitation_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@joining.post("/{secret}/accept", response_model=Joined)
def accept(secret: str, session: SessionDep, caller: ManagingAccount):
    """Join the project the invitation names, as the researcher it was sent to (a token
    with the whole account's power, or a browser signed in with a password)."""
    project = service.accept(session=session, secret=secret, researcher=caller.researcher)
    role = service.role_in(session=session, researcher=caller.researcher, project_id=project.id)
    assert role is not None
    return Joined(project_id=project.id, name=project.name, role=role.role)
