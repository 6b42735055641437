"""Who a researcher's request comes from, and whether it may do what its route does.

A caller is reached by a bearer token (API clients) or the workspace's session cookie
(the pages, which then send the CSRF token with every change). Every researcher's route
names its action through one of the aliases below (`researcher: Viewing`, ...); the
rules for each action are in app/auth/access.py, and the access matrix test reads the
action each route declares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.auth.access import Action, Caller
from app.auth.service import Unauthenticated, token_caller, web_session_caller
from app.core.deps import (
    CSRF_HEADER,
    SAFE_METHODS,
    CsrfChecked,
    CsrfRefused,
    SessionDep,
    SignInRequired,
    workspace_session_key,
)
from app.core.errors import Forbidden, NotFound
from app.core.fields import INT4_MAX
from app.members.service import role_in
from app.models import Researcher

_bearer = HTTPBearer(auto_error=False, description="A token from `closer create-token`.")

_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


def _caller(
    request: Request, session: Session, credentials: HTTPAuthorizationCredentials | None
) -> tuple[Caller | None, str | None]:
    """Who calls, by bearer token (a wrong one is a 401) or else by the workspace's
    session cookie; and the session key when it was the cookie."""
    if credentials is not None:
        try:
            return token_caller(session=session, token=credentials.credentials), None
        except Unauthenticated as refused:
            raise HTTPException(401, str(refused.detail), _UNAUTHORIZED) from None
    key = workspace_session_key(request)
    return (None if key is None else web_session_caller(session=session, key=key)), key


def _check_reach(
    request: Request, session: Session, caller: Caller, action: Action, all_projects: bool
) -> Caller:
    """A project outside a limited token's reach does not exist for it (404, as for one
    that does not exist; one where the researcher has no role is the route's 404); an
    action beyond the token's scope or their role there is refused (403). The caller,
    with that role."""
    project_id = request.path_params.get("project_id")
    # (An id no row can have is the route's own 422, after this.)
    if project_id is not None and str(project_id).isdigit() and int(project_id) <= INT4_MAX:
        if not caller.reaches(int(project_id)):
            raise NotFound(f"no project {project_id}")
        role = role_in(session=session, researcher=caller.researcher, project_id=int(project_id))
        # No role: the route's get_project answers 404, after the request's own checks.
        if role is not None:
            caller = replace(
                caller, project_role=role.role, sees_participants=role.sees_participants
            )
    if not caller.may(action):
        raise Forbidden(caller.refusal(action))
    if all_projects and not caller.all_projects:
        raise Forbidden(
            "this token is limited to some projects: making a project needs a token over "
            "all of yours"
        )
    return caller


def requires(action: Action, *, page: bool = False, all_projects: bool = False) -> Callable:
    """The dependency of a route that performs `action`: the caller, once it may.

    `page`: a workspace page (a browser that is not signed in is sent to sign in, and
    every form is CSRF-checked); else the JSON API (401; a signed-in browser's change
    must carry the X-CSRF-Token header). `all_projects`: the route makes a project, so
    a token limited to some refuses it."""

    def api_caller(
        request: Request,
        session: SessionDep,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Caller:
        caller, key = _caller(request, session, credentials)
        if caller is None:
            raise HTTPException(
                401, "missing 'Authorization: Bearer <token>' header", _UNAUTHORIZED
            )
        cookies = request.app.state.workspace_cookies
        if (
            key is not None
            and request.method not in SAFE_METHODS
            and not cookies.csrf_holds(key, request.headers.get(CSRF_HEADER))
        ):
            raise CsrfRefused(
                "a signed-in browser must send the page's X-CSRF-Token header with this request"
            )
        caller = _check_reach(request, session, caller, action, all_projects)
        request.state.caller = caller
        return caller

    # Not async: it reads the database, which would hold up the event loop meanwhile.
    def page_caller(
        request: Request,
        session: SessionDep,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        _csrf: CsrfChecked,
    ) -> Caller:
        caller, _ = _caller(request, session, credentials)
        if caller is None:
            raise SignInRequired("sign in first")
        request.state.caller = caller
        caller = _check_reach(request, session, caller, action, all_projects)
        request.state.caller = caller
        return caller

    # Marked with its action, which the access matrix test reads.
    dependency: Any = page_caller if page else api_caller
    dependency.action = action
    return dependency


def _researcher_of(caller_dependency: Callable) -> Callable:
    # A default rather than Annotated: the annotation is a string here (postponed
    # evaluation), and FastAPI resolves strings in the module's globals, not this scope.
    def researcher(caller: Caller = Depends(caller_dependency)) -> Researcher:  # noqa: B008
        return caller.researcher

    return researcher


def _researcher(action: Action, **where: bool):
    return Annotated[Researcher, Depends(_researcher_of(requires(action, **where)))]


def _caller_alias(action: Action, **where: bool):
    return Annotated[Caller, Depends(requires(action, **where))]


# The JSON API's routes, by what they do.
Serving = _researcher(Action.serve)
Viewing = _researcher(Action.view)
ViewingAll = _caller_alias(Action.view)  # a list across projects: filtered by the caller
Exporting = _researcher(Action.export)
Changing = _researcher(Action.change)
ChangingCaller = _caller_alias(Action.change)  # a change some of whose fields need more
CreatingProjects = _researcher(Action.change, all_projects=True)
DeletingProjects = _researcher(Action.delete_project)
ErasingParticipants = _researcher(Action.erase_participant)
ManagingAccount = _caller_alias(Action.manage_account)
Identifying = _researcher(Action.identify)
ManagingMembers = _researcher(Action.manage_members)

# The workspace's pages, by what they do.
ViewingPage = _researcher(Action.view, page=True)
ViewingAllPage = _caller_alias(Action.view, page=True)
ExportingPage = _researcher(Action.export, page=True)
ChangingPage = _researcher(Action.change, page=True)
ChangingCallerPage = _caller_alias(Action.change, page=True)
CreatingProjectsPage = _researcher(Action.change, page=True, all_projects=True)
DeletingProjectsPage = _researcher(Action.delete_project, page=True)
ErasingParticipantsPage = _researcher(Action.erase_participant, page=True)
ManagingAccountPage = _caller_alias(Action.manage_account, page=True)
IdentifyingPage = _researcher(Action.identify, page=True)
ManagingMembersPage = _researcher(Action.manage_members, page=True)
