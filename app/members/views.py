"""The Members page (who shares a project; the owner invites, changes roles, removes and
hands over) and the invitation link's page, where the invitee signs in or signs up and
joins."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.auth import service as auth
from app.auth.access import Action
from app.auth.deps import ManagingMembersPage, ViewingPage
from app.auth.views import anonymous_form_page, signed_in_redirect
from app.core.db import roll_back
from app.core.deps import CsrfChecked, SessionDep, workspace_session_key
from app.core.errors import ServiceError
from app.core.fields import RowId
from app.core.forms import SENT_AGAIN, remember_sent, sent_before
from app.core.pages import render as page
from app.core.routes import StrictJSONRoute
from app.members import service
from app.members.api import invitation_link, mail_invitation
from app.models import Project, ProjectRole, Researcher
from app.projects.service import get_project

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)


def _members_page(
    request: Request,
    session,
    researcher: Researcher,
    project: Project,
    *,
    error: str | None = None,
    link: str | None = None,
    mailed: str | None = None,
    mail_error: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    caller = request.state.caller
    return page(
        request,
        "members/members.html",
        {
            "researcher": researcher,
            "project": project,
            "tab": "members",
            "members": service.members(session=session, project=project),
            "invitations": service.pending_invitations(session=session, project=project)
            if caller.may(Action.manage_members)
            else [],
            "manages": caller.may(Action.manage_members),
            "my_role": caller.project_role,
            "summaries": service.ROLE_SUMMARIES,
            "roles": service.INVITED_ROLES,
            "error": error,
            "link": link,
            "mailed": mailed,
            "mail_error": mail_error,
        },
        status_code,
    )


@router.get("/projects/{project_id}/members", response_class=HTMLResponse, name="members_page")
def members_page(project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return _members_page(request, session, researcher, project)


@router.post(
    "/projects/{project_id}/members/invite", response_class=HTMLResponse, name="invite_form"
)
def invite_form(
    project_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ManagingMembersPage,
    email: Annotated[str, Form(max_length=254)] = "",
    role: Annotated[str, Form(max_length=20)] = "viewer",
    form_id: Annotated[str, Form(max_length=40)] = "",
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    if sent_before(request, form_id):
        return _members_page(
            request, session, researcher, project, error=SENT_AGAIN, status_code=409
        )
    try:
        address = auth.normalise_email(email)
        secret, row = service.invite(
            session=session, project=project, invited_by=researcher, email=address, role=role
        )
    except ServiceError as refused:
        return _members_page(
            request, session, researcher, project, error=str(refused.detail), status_code=422
        )
    link = invitation_link(request, secret)
    mailed, mail_error = mail_invitation(request, project, researcher, row, link)
    response = _members_page(
        request,
        session,
        researcher,
        project,
        link=link,
        mailed=row.email if mailed else None,
        mail_error=mail_error,
    )
    response.headers["Cache-Control"] = "no-store"
    remember_sent(request, response, form_id)
    return response


@router.post("/projects/{project_id}/members/{researcher_id}", name="member_form")
def member_form(
    project_id: RowId,
    researcher_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ManagingMembersPage,
    action: Annotated[str, Form(max_length=20)] = "change",
    role: Annotated[str, Form(max_length=20)] = "",
    sees_participants: Annotated[str, Form(max_length=5)] = "",
) -> Response:
    """Change a member's role, remove them, or hand them the project."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    try:
        if action == "remove":
            service.remove_member(session=session, project=project, researcher_id=researcher_id)
        elif action == "owner":
            service.hand_over(session=session, project=project, researcher_id=researcher_id)
        else:
            service.change_member(
                session=session,
                project=project,
                researcher_id=researcher_id,
                role=role or None,
                sees_participants=sees_participants == "on",
            )
    except ServiceError as refused:
        return _members_page(
            request, session, researcher, project, error=str(refused.detail), status_code=422
        )
    target = request.url_for("members_page", project_id=project.id).path
    if action == "owner":  # no longer theirs to manage: the overview
        target = request.url_for("project_page", project_id=project.id).path
    return RedirectResponse(target, status_code=303)


@router.post(
    "/projects/{project_id}/invitations/{invitation_id}/revoke", name="revoke_invitation_form"
)
def revoke_invitation_form(
    project_id: RowId,
    invitation_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ManagingMembersPage,
) -> Response:
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    service.revoke_invitation(session=session, project=project, invitation_id=invitation_id)
    return RedirectResponse(
        request.url_for("members_page", project_id=project.id).path, status_code=303
    )


def _signed_in_researcher(request: Request, session) -> Researcher | None:
    """The researcher this browser is signed in as with a password (a browser signed in
    with a token joins nothing: joining changes what the whole account reaches)."""
    key = workspace_session_key(request)
    caller = None if key is None else auth.web_session_caller(session=session, key=key)
    return None if caller is None or caller.token is not None else caller.researcher


def _invitation_page(
    request: Request, session, secret: str, *, error: str | None = None, status_code: int = 200
) -> Response:
    try:
        invitation, project = service.open_invitation(session=session, secret=secret)
    except ServiceError as gone:
        return page(
            request,
            "members/invitation.html",
            {"gone": str(gone.detail)},
            gone.status_code,
        )
    signed_in = _signed_in_researcher(request, session)
    has_account = auth.password_account(session=session, email=invitation.email) is not None
    context = {
        "gone": None,
        "invitation": invitation,
        "project": project,
        "inviter": session.get(Researcher, invitation.invited_by)
        if invitation.invited_by
        else None,
        "summary": service.ROLE_SUMMARIES[ProjectRole(invitation.role)],
        "signed_in": signed_in,
        "has_account": has_account,
        "error": error,
        "login": request.url_for("login").path
        + "?next="
        + request.url_for("invitation_page", secret=secret).path,
    }
    if signed_in is None and not has_account:
        return anonymous_form_page(request, "members/invitation.html", context, status_code)
    return page(request, "members/invitation.html", context, status_code)


@router.get("/invitations/{secret}", response_class=HTMLResponse, name="invitation_page")
def invitation_page(secret: str, request: Request, session: SessionDep):
    """What the invitation is for, and the way in: join (signed in as its address), sign
    in first (an account has it), or sign up with it."""
    return _invitation_page(request, session, secret[:200])


@router.post("/invitations/{secret}", response_class=HTMLResponse)
def join(
    secret: str,
    request: Request,
    session: SessionDep,
    _csrf: CsrfChecked,
    name: Annotated[str, Form(max_length=100)] = "",
    password: Annotated[str, Form(max_length=auth.MAX_PASSWORD_LENGTH)] = "",
) -> Response:
    """Join as the signed-in researcher, or sign up with the invitation's address (a
    name and a password) and join; the link is used either way."""
    secret = secret[:200]
    signed_in = _signed_in_researcher(request, session)
    try:
        if signed_in is not None:
            project = service.accept(session=session, secret=secret, researcher=signed_in)
            return RedirectResponse(
                request.url_for("project_page", project_id=project.id).path, status_code=303
            )
        invitation, _ = service.open_invitation(session=session, secret=secret)
        if auth.password_account(session=session, email=invitation.email) is not None:
            raise ServiceError(f"{invitation.email} has an account already: sign in first")
        if not name.strip():
            raise ServiceError("name: give the name your colleagues know you by")
        if auth.researcher_named(session=session, name=name.strip()) is not None:
            raise ServiceError(f"name: '{name.strip()[:100]}' is taken; choose another")
        researcher, _ = auth.set_researcher_password(
            session=session, email=invitation.email, password=password, name=name.strip()
        )
        project = service.accept(session=session, secret=secret, researcher=researcher)
        key = auth.open_web_session(session=session, researcher=researcher)
    except ServiceError as refused:
        roll_back(session)
        return _invitation_page(
            request, session, secret, error=str(refused.detail), status_code=422
        )
    return signed_in_redirect(
        request, key, request.url_for("project_page", project_id=project.id).path
    )
