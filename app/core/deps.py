"""Request dependencies, as `Annotated` aliases so route signatures read like sentences."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Header, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.auth.service import authenticate
from app.core.config import Settings
from app.core.db import unit_of_work
from app.models import Project, Researcher
from app.scheduling.service import ActiveRater


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """The request's unit of work: services never commit, this does once at the end."""
    with unit_of_work(request.app.state.session_factory) as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
# scope="function": commit before the response goes out, so a 2xx means the write is durable.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="A token from `closer create-token`.")


def get_current_researcher(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Researcher:
    unauthorized = {"WWW-Authenticate": "Bearer"}
    if credentials is None:
        raise HTTPException(401, "missing 'Authorization: Bearer <token>' header", unauthorized)
    researcher = authenticate(session=session, token=credentials.credentials)
    if researcher is None:
        raise HTTPException(401, "invalid or revoked token", unauthorized)
    return researcher


CurrentResearcher = Annotated[Researcher, Depends(get_current_researcher)]


RATER_COOKIE = "closer_rater"


def get_rated_project(session: SessionDep, slug: str) -> Project:
    from app.raters.service import project_by_slug

    return project_by_slug(session=session, slug=slug)


RatedProject = Annotated[Project, Depends(get_rated_project)]


@dataclass(frozen=True)
class RaterSession:
    project: Project
    rater: ActiveRater


async def get_rater_token(
    request: Request,
    x_rater_token: Annotated[str | None, Header(description="From joining the study")] = None,
) -> str | None:
    """The rater's session token, from the header or the rating page's cookie, if its
    signature holds (None otherwise: a made-up token costs no lookup)."""
    return request.app.state.rater_tokens.verify(x_rater_token or request.cookies.get(RATER_COOKIE))


def cookie_rater_token(request: Request) -> str | None:
    """The rating page's session token, if its signature holds."""
    return request.app.state.rater_tokens.verify(request.cookies.get(RATER_COOKIE))


RaterToken = Annotated[str | None, Depends(get_rater_token)]


def find_rater(session: Session, slug: str, token: str | None) -> RaterSession:
    """The study and its rater, by the rater's session token."""
    from app.raters.service import authenticate_in_study, project_by_slug

    found = authenticate_in_study(session=session, slug=slug, token=token)
    if found is None:
        project_by_slug(session=session, slug=slug)  # an unknown study is a 404
        raise HTTPException(401, "not joined: open the study's link first (or send X-Rater-Token)")
    return RaterSession(*found)


def public_base_url(request: Request) -> str:
    """Where people reach this service: the configured CLOSER_PUBLIC_URL (required in
    production), else the address this request came to."""
    configured = request.app.state.settings.public_url
    return configured.rstrip("/") if configured else str(request.base_url).rstrip("/")


def is_https(request: Request) -> bool:
    """Whether browsers reach us over HTTPS (then cookies are marked Secure)."""
    return public_base_url(request).startswith("https://") or request.url.scheme == "https"


def is_cross_site(request: Request) -> bool:
    """Whether a browser sent this request from another site's page: a form posted from
    elsewhere (say, one that signs a visitor into a study as someone else). Browsers say
    so in Sec-Fetch-Site; older ones send an Origin to compare with our host. A request
    with neither comes from no browser page at all."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site == "cross-site"
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
        yield session
