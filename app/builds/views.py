"""The workspace's CompRF builds: start one, watch each tree grow (the list refreshes
itself while a build runs), see the answers it still needs and when that may be at the
current answer rate, and pause, resume or cancel it."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from app.auth.deps import ChangingPage, ViewingPage
from app.builds import jobs, service
from app.builds.schemas import BuildCreate
from app.core.db import roll_back
from app.core.deps import SessionDep
from app.core.errors import ServiceError
from app.core.fields import RowId
from app.core.forms import read_model_form
from app.core.pages import render as page
from app.core.pages import render_page_or_part
from app.core.routes import StrictJSONRoute
from app.models import BuildStatus
from app.projects.service import get_project, recent_answers_per_hour

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)
BUILD_ACTIONS = {
    "pause": BuildStatus.paused,
    "resume": BuildStatus.running,
    "cancel": BuildStatus.cancelled,
}


def _builds_page(
    request: Request,
    session,
    researcher,
    project,
    *,
    form: dict | None = None,
    errors: dict | None = None,
    status_code: int = 200,
) -> Response:
    builds = list(reversed(service.list_builds(session=session, project=project)))
    numbers = {build.id: len(builds) - index for index, build in enumerate(builds)}
    context = {
        "researcher": researcher,
        "project": project,
        "tab": "builds",
        "builds": builds,
        "numbers": numbers,
        "exclusion_changes": {
            build.id: service.exclusion_change(session, build) for build in builds
        },
        "live": any(build.status is BuildStatus.running for build in builds),
        "answers_per_hour": recent_answers_per_hour(session=session, project=project),
        "defaults": BuildCreate().model_dump(),
        "form": form or {},
        "errors": errors or {},
        "estimate": _estimate(session, project, BuildCreate()),
        "params": BuildCreate(),
    }
    return render_page_or_part(
        request, "builds/builds.html", "builds/_builds.html", context, status_code
    )


def _estimate(session, project, body: BuildCreate) -> service.BuildEstimate:
    return service.estimate(
        session=session,
        project=project,
        params=service.BuildParams(**body.model_dump()),
        answers_per_hour=recent_answers_per_hour(session=session, project=project),
    )


@router.post(
    "/projects/{project_id}/builds/estimate",
    response_class=HTMLResponse,
    name="build_estimate_form",
)
async def build_estimate(
    project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage
):
    """The form's estimate as its fields change (what POST .../builds/estimate says)."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    submitted = await read_model_form(request, BuildCreate)
    found = None if submitted.body is None else _estimate(session, project, submitted.body)
    return page(
        request,
        "builds/_estimate.html",
        {"estimate": found, "params": submitted.body, "errors": submitted.errors},
    )


@router.get("/projects/{project_id}/builds", response_class=HTMLResponse, name="builds_page")
def builds_page(project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return _builds_page(request, session, researcher, project)


@router.post("/projects/{project_id}/builds", response_class=HTMLResponse, name="start_build_form")
async def start_build(
    project_id: RowId, request: Request, session: SessionDep, researcher: ChangingPage
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    submitted = await read_model_form(request, BuildCreate)
    body, form = submitted.body, submitted.shown
    if body is None:
        return _builds_page(
            request,
            session,
            researcher,
            project,
            form=form,
            errors=submitted.errors,
            status_code=422,
        )
    try:
        jobs.start_build(
            session=session, project=project, params=service.BuildParams(**body.model_dump())
        )
    except ServiceError as refused:
        roll_back(session)
        return _builds_page(
            request,
            session,
            researcher,
            project,
            form=form,
            errors={"form": str(refused.detail)},
            status_code=refused.status_code,
        )
    return RedirectResponse(
        request.url_for("builds_page", project_id=project_id).path, status_code=303
    )


@router.get(
    "/projects/{project_id}/builds/{build_id}/again",
    response_class=HTMLResponse,
    name="build_again_page",
)
def build_again_page(
    project_id: RowId,
    build_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ViewingPage,
):
    """What building a finished build again would ask of raters, before it starts."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    build = service.get_build(session=session, project=project, build_id=build_id)
    builds = service.list_builds(session=session, project=project)
    return page(
        request,
        "builds/again.html",
        {
            "researcher": researcher,
            "project": project,
            "tab": "builds",
            "build": build,
            "number": 1 + [b.id for b in builds].index(build.id),
            "change": service.exclusion_change(session, build),
            "estimate": service.estimate_again(
                session=session,
                build=build,
                answers_per_hour=recent_answers_per_hour(session=session, project=project),
            ),
        },
    )


@router.post("/projects/{project_id}/builds/{build_id}/{action}", name="build_action")
def change_build(
    project_id: RowId,
    build_id: RowId,
    action: str,
    request: Request,
    session: SessionDep,
    researcher: ChangingPage,
):
    if action not in BUILD_ACTIONS and action != "rebuild":
        raise ServiceError(
            f"a build can be {', '.join(BUILD_ACTIONS)}d or rebuilt, not '{action[:20]}'"
        )
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    build = service.get_build(session=session, project=project, build_id=build_id)
    if action == "rebuild":
        jobs.build_again(session=session, build=build)
    else:
        service.set_status(session=session, build=build, status=BUILD_ACTIONS[action])
    return RedirectResponse(
        request.url_for("builds_page", project_id=project_id).path, status_code=303
    )
