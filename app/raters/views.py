"""The researcher's page of a study's raters, where a rater is excluded or included."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.auth.deps import ChangingPage, ErasingParticipantsPage, IdentifyingPage, ViewingPage
from app.core.deps import SessionDep
from app.core.errors import ServiceError
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.projects.service import get_project
from app.raters import detail, erasure, participants, quality
from app.raters import service as raters


def _page(request: Request, name: str, context: dict, status_code: int = 200) -> HTMLResponse:
    return request.app.state.templates.TemplateResponse(
        request, name, context, status_code=status_code
    )


router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)
RATERS_PER_PAGE = 50
EXCLUSION_CHOICES = {"exclude": True, "include": False, "auto": None}


def _raters_context(request: Request, session, researcher, project) -> dict:
    query = request.query_params
    sort = query.get("sort", "id")
    sort = sort if sort in raters.RATER_SORTS else "id"
    descending = query.get("order") == "desc"
    page_text = query.get("page", "1")
    number = int(page_text) if page_text.isascii() and page_text.isdigit() else 1
    number = max(1, min(number, 1_000_000))
    shown, total = raters.page_of_raters(
        session=session,
        project=project,
        sort=sort,
        descending=descending,
        offset=(number - 1) * RATERS_PER_PAGE,
        limit=RATERS_PER_PAGE,
    )
    return {
        "researcher": researcher,
        "project": project,
        "tab": "raters",
        "raters": shown,
        "medians": raters.median_response_times(
            session=session, rater_ids=[rater.id for rater in shown]
        ),
        "total": total,
        "page": number,
        "pages": max(1, -(-total // RATERS_PER_PAGE)),
        "sort": sort,
        "descending": descending,
    }


@router.get("/projects/{project_id}/raters", response_class=HTMLResponse, name="raters_page")
def raters_page(project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return _page(
        request, "raters/raters.html", _raters_context(request, session, researcher, project)
    )


@router.post("/projects/{project_id}/raters/quality", name="refresh_rater_quality")
def refresh_quality_form(
    project_id: RowId, request: Request, session: SessionDep, researcher: ChangingPage
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    quality.refresh(session=session, project=project)
    return RedirectResponse(
        request.url_for("raters_page", project_id=project_id).path, status_code=303
    )


@router.post(
    "/projects/{project_id}/raters/{rater_id}/exclusion",
    response_class=HTMLResponse,
    name="rater_exclusion",
)
def decide_exclusion(
    project_id: RowId,
    rater_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ChangingPage,
    decision: Annotated[str, Form(max_length=10)],
    back: Annotated[str, Form(max_length=500)] = "",
):
    """Exclude or include a rater (or hand it back to the thresholds); builds in progress
    are replayed without (or with) their answers, as through the API."""
    if decision not in EXCLUSION_CHOICES:
        raise ServiceError(f"decision must be one of {', '.join(EXCLUSION_CHOICES)}")
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    rater = raters.get_rater(session=session, project=project, rater_id=rater_id)
    quality.decide(
        session=session, project=project, rater=rater, excluded=EXCLUSION_CHOICES[decision]
    )
    if request.headers.get("HX-Request"):
        medians = raters.median_response_times(session=session, rater_ids=[rater.id])
        return _page(
            request,
            "raters/_row.html",
            {"project": project, "rater": rater, "medians": medians, "back": back},
        )
    target = request.url_for("raters_page", project_id=project_id).path
    detail_page = request.url_for("rater_page", project_id=project_id, rater_id=rater_id).path
    if back == detail_page:  # decided on the rater's own page: back there
        return RedirectResponse(detail_page, status_code=303)
    query = back.partition("?")[2]
    return RedirectResponse(target + (f"?{query}" if query else ""), status_code=303)


PARTICIPANTS_PER_PAGE = 100


@router.get(
    "/projects/{project_id}/participants", response_class=HTMLResponse, name="participants_page"
)
def participants_page(
    project_id: RowId, request: Request, session: SessionDep, researcher: IdentifyingPage
):
    """Who took part and how each session ended, with the code shown: the page a
    researcher approves payments from, and its CSV. A page at a time, of one outcome or
    all (?outcome=…&page=…)."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    found = participants.participants(session=session, project=project)
    query = request.query_params
    outcome = query.get("outcome", "")
    chosen = outcome if outcome in participants.Outcome.__members__ else ""
    shown = participants.of_outcome(found, participants.Outcome(chosen) if chosen else None)
    pages = max(1, -(-len(shown) // PARTICIPANTS_PER_PAGE))
    page_text = query.get("page", "1")
    number = int(page_text) if page_text.isascii() and page_text.isdigit() else 1
    number = max(1, min(number, pages))
    first = (number - 1) * PARTICIPANTS_PER_PAGE
    return _page(
        request,
        "raters/participants.html",
        {
            "researcher": researcher,
            "project": project,
            "tab": "participants",
            "participants": shown[first : first + PARTICIPANTS_PER_PAGE],
            "first": first,
            "matching": len(shown),
            "total": len(found),
            "outcome": chosen,
            "page": number,
            "pages": pages,
            "counts": participants.outcome_counts(found),
            "words": participants.OUTCOME_WORDS,
            "places": participants.places_taken(session=session, project=project),
            "erasures": erasure.erasures(session=session, project=project),
            "erasure_words": {
                each.value: words for each, words in participants.OUTCOME_WORDS.items()
            },
            "erased": _count(query.get("erased", "")),
        },
    )


def _count(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) < 12 else None


RATER_ANSWERS_SHOWN = 100


@router.get(
    "/projects/{project_id}/raters/{rater_id}", response_class=HTMLResponse, name="rater_page"
)
def rater_page(
    project_id: RowId,
    rater_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ViewingPage,
):
    """One rater: their figures, their answers (attention checks with the result) and
    their response times beside everyone's; excluded or included from here too, and
    their data request answered (their records downloaded, or their erasure)."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    rater = raters.get_rater(session=session, project=project, rater_id=rater_id)
    return _page(request, "raters/rater.html", _rater_context(request, session, project, rater))


def _rater_context(request: Request, session, project, rater, **extra) -> dict:
    shown = detail.answers(session=session, rater=rater, limit=RATER_ANSWERS_SHOWN)
    return {
        "researcher": request.state.caller.researcher,
        "caller": request.state.caller,
        "project": project,
        "tab": "raters",
        "rater": rater,
        "answers": shown,
        "times": detail.response_times(session=session, rater=rater),
        "shown_limit": RATER_ANSWERS_SHOWN,
        "back": request.url_for("rater_page", project_id=project.id, rater_id=rater.id).path,
        **extra,
    }


@router.post(
    "/projects/{project_id}/raters/{rater_id}/erase",
    response_class=HTMLResponse,
    name="erase_rater",
)
def erase_rater_form(
    project_id: RowId,
    rater_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ErasingParticipantsPage,
    confirm: Annotated[str, Form(max_length=300)] = "",
):
    """Erase the participant at their request, once their platform id is typed again to
    confirm (it cannot be undone); then the participants page, which logs the erasure."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    rater = raters.get_rater(session=session, project=project, rater_id=rater_id)
    if confirm.strip() != rater.external_id:
        message = (
            f"type the participant id {rater.external_id} to confirm the erasure"
            if not confirm.strip()
            else f"'{confirm.strip()}' is not this participant's id ({rater.external_id}): "
            "nothing was erased"
        )
        context = _rater_context(request, session, project, rater, erase_error=message)
        return _page(request, "raters/rater.html", context, status_code=422)
    erased = erasure.erase(
        session=session, project=project, researcher=researcher, participant=rater.external_id
    )
    target = request.url_for("participants_page", project_id=project_id).path
    return RedirectResponse(f"{target}?erased={erased.answers}", status_code=303)
