"""Request dependencies every domain shares, as `Annotated` aliases so route signatures
read like sentences: settings, the unit of work, CSRF, where people reach us. Who the
caller is lives with its domain: researchers in app/auth/deps.py, raters in
app/rating/deps.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request, Response
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import unit_of_work
from app.core.errors import ServiceError


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """The request's unit of work: services never commit, this does once at the end."""
    with transaction(request) as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
# scope="function": commit before the response goes out, so a 2xx means the write is durable.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

SESSION_COOKIE = "closer_session"
SIGN_IN_NONCE_COOKIE = "closer_sign_in"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class CsrfRefused(ServiceError):
    status_code = 403


class SignInRequired(ServiceError):
    """A workspace page asked for by a browser that is not signed in: it is sent to the
    sign-in page (see app/main.py)."""

    status_code = 401


def workspace_session_key(request: Request) -> str | None:
    """The key of the browser's workspace session, if its cookie's signature holds."""
    return request.app.state.workspace_cookies.session_key(request.cookies.get(SESSION_COOKIE))


def csrf_anchor(request: Request) -> str | None:
    """What this browser's CSRF token is derived from: its session key once signed in,
    before that the sign-in page's nonce cookie."""
    given = getattr(request.state, "csrf_anchor", None)
    if given is not None:
        return given
    cookies = request.app.state.workspace_cookies
    return workspace_session_key(request) or cookies.nonce(
        request.cookies.get(SIGN_IN_NONCE_COOKIE)
    )


def csrf_token(request: Request) -> str:
    """The token this browser's forms and htmx requests send (empty before it has a
    cookie to derive one from)."""
    anchor = csrf_anchor(request)
    return request.app.state.workspace_cookies.csrf_token(anchor) if anchor else ""


async def check_csrf(request: Request) -> None:
    """Refuse a state-changing request from a browser page unless it carries the CSRF
    token of this browser (form field `csrf_token` or header X-CSRF-Token) and came
    from a page of this site."""
    if request.method in SAFE_METHODS:
        return
    presented = request.headers.get(CSRF_HEADER)
    content_type = request.headers.get("content-type", "")
    if presented is None and content_type.startswith(
        ("application/x-www-form-urlencoded", "multipart/form-data")
    ):
        value = (await request.form()).get(CSRF_FIELD)
        presented = value if isinstance(value, str) else None
    cookies = request.app.state.workspace_cookies
    if is_from_another_origin(request) or not cookies.csrf_holds(csrf_anchor(request), presented):
        raise CsrfRefused(
            "this form was not sent from its own page (missing or wrong CSRF token): "
            "reload the page and try again"
        )


CsrfChecked = Annotated[None, Depends(check_csrf)]


def public_base_url(request: Request) -> str:
    """Where people reach this service: the configured CLOSER_PUBLIC_URL (required in
    production), else the address this request came to."""
    configured = request.app.state.settings.public_url
    return configured.rstrip("/") if configured else str(request.base_url).rstrip("/")


def public_study_url(request: Request, slug: str) -> str:
    """The link raters open: the study's instructions page."""
    path = request.app.url_path_for("instructions", slug=slug)
    return public_base_url(request) + path


def is_https(request: Request) -> bool:
    """Whether browsers reach us over HTTPS (then cookies are marked Secure)."""
    return public_base_url(request).startswith("https://") or request.url.scheme == "https"


def hand_cookie(
    request: Request,
    response: Response,
    name: str,
    value: str,
    max_age: int | None = None,
    path: str = "/",
) -> None:
    """A cookie of ours: never read by scripts, never sent by other sites' posts."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite="lax",
        secure=is_https(request),
        path=path,
    )


def is_from_another_origin(request: Request) -> bool:
    """Whether a browser sent this request from a page of another origin: a form posted
    from elsewhere (say, one that signs a visitor into a study as someone else). A page
    of the same site on another port or a sibling subdomain counts as elsewhere. Browsers
    say so in Sec-Fetch-Site; older ones send an Origin to compare with our host. A
    request with neither comes from no browser page at all."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    return origin == "null" or urlsplit(origin).netloc != request.headers.get("host", "")


@contextmanager
def transaction(request: Request) -> Iterator[Session]:
    """A unit of work opened and closed inside the calling route's own thread.

    The raters' routes use it instead of SessionDep: a generator dependency gives its
    connection back in a later threadpool call, and with hundreds of raters at once
    every pool thread can end up waiting for a connection that only such a call would
    free. Here a thread holds at most one connection, for as long as it works."""
    with unit_of_work(request.app.state.session_factory) as session:
        # A request that writes locks the project it works on (projects.get_project), so
        # a deletion of the project waits for it, or it for the deletion.
        session.info["writes"] = request.method not in SAFE_METHODS
        yield session
