"""Who a researcher's request comes from: a bearer token (API clients) or the workspace's
session cookie (the pages, which then send the CSRF token with every change)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.auth.service import authenticate, web_session_researcher
from app.core.deps import (
    CSRF_HEADER,
    SAFE_METHODS,
    CsrfChecked,
    CsrfRefused,
    SessionDep,
    SignInRequired,
    workspace_session_key,
)
from app.models import Researcher

_bearer = HTTPBearer(auto_error=False, description="A token from `closer create-token`.")

_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


def _caller(
    request: Request, session: Session, credentials: HTTPAuthorizationCredentials | None
) -> tuple[Researcher | None, str | None]:
    """Who calls, by bearer token (a wrong one is a 401) or else by the workspace's
    session cookie; and the session key when it was the cookie."""
    if credentials is not None:
        researcher = authenticate(session=session, token=credentials.credentials)
        if researcher is None:
            raise HTTPException(401, "invalid or revoked token", _UNAUTHORIZED)
        return researcher, None
    key = workspace_session_key(request)
    return (None if key is None else web_session_researcher(session=session, key=key)), key


def get_current_researcher(
    request: Request,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Researcher:
    """The caller: by bearer token, or by the workspace's session cookie (then a request
    that changes something must carry the page's X-CSRF-Token header)."""
    researcher, key = _caller(request, session, credentials)
    if researcher is None:
        raise HTTPException(401, "missing 'Authorization: Bearer <token>' header", _UNAUTHORIZED)
    cookies = request.app.state.workspace_cookies
    if (
        key is not None
        and request.method not in SAFE_METHODS
        and not cookies.csrf_holds(key, request.headers.get(CSRF_HEADER))
    ):
        raise CsrfRefused(
            "a signed-in browser must send the page's X-CSRF-Token header with this request"
        )
    return researcher


def get_workspace_researcher(
    request: Request,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    _csrf: CsrfChecked,
) -> Researcher:
    """The researcher a workspace page is for (signed in by cookie, or a bearer token);
    a browser that is not signed in is sent to the sign-in page."""
    researcher, _ = _caller(request, session, credentials)
    if researcher is None:
        raise SignInRequired("sign in first")
    return researcher


WorkspaceResearcher = Annotated[Researcher, Depends(get_workspace_researcher)]


CurrentResearcher = Annotated[Researcher, Depends(get_current_researcher)]
