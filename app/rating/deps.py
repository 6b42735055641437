"""Who a rater's request comes from: their session token, from the X-Rater-Token header
(the JSON API) or the rating page's cookie, and the study behind the public link."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy.orm import Session

from app.core.deps import SessionDep
from app.core.i18n import Wording, languages, wording_for
from app.core.signing import RATER_COOKIE
from app.models import Project
from app.raters.service import authenticate_in_study, project_by_slug
from app.scheduling.service import ActiveRater

PREFIX = "/r/{slug}"
MEDIA = "/media"


def media_folder(slug: str) -> str:
    """Where the study's images are served (app/rating/views.py), without a lookup."""
    return PREFIX.format(slug=slug) + MEDIA


def study_wording(request: Request, project: Project | None) -> Wording:
    """What a rater reads, in the study's language their browser prefers, with the
    study's own words (no study, as on a wrong link: any language the pages speak)."""
    asked = request.headers.get("accept-language")
    if project is None:
        return wording_for(asked, languages())
    return wording_for(asked, project.languages, project.texts)


def get_rated_project(session: SessionDep, slug: str) -> Project:
    return project_by_slug(session=session, slug=slug)


RatedProject = Annotated[Project, Depends(get_rated_project)]


@dataclass(frozen=True)
class RaterInStudy:
    """A rater's request: the study and the rater, found by their session token."""

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


def find_rater(session: Session, slug: str, token: str | None) -> RaterInStudy:
    """The study and its rater, by the rater's session token."""
    found = authenticate_in_study(session=session, slug=slug, token=token)
    if found is None:
        project_by_slug(session=session, slug=slug)  # an unknown study is a 404
        raise HTTPException(401, "not joined: open the study's link first (or send X-Rater-Token)")
    return RaterInStudy(*found)
