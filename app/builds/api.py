"""CompRF builds over REST: start one, watch it, pause, resume or cancel it; label
new items with a finished one by routing them (through raters or answered by the client)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from app.auth.deps import Changing, Serving, Viewing
from app.builds import jobs, routing, service
from app.builds.schemas import (
    AgainEstimateOut,
    BuildCreate,
    BuildEstimateOut,
    BuildOut,
    ExclusionChangeOut,
    PendingQuery,
    RoutingAnswers,
    RoutingCreate,
    RoutingOut,
)
from app.core.db import ordinal_in_project
from app.core.deps import SessionDep
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.models import Build, BuildStatus
from app.projects.service import get_project, recent_answers_per_hour

router = APIRouter(
    prefix="/projects/{project_id}/builds", tags=["builds"], route_class=StrictJSONRoute
)


def _build(session, researcher, project_id: RowId, build_id: RowId):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return service.get_build(session=session, project=project, build_id=build_id)


def _out(session, build, number: int | None = None) -> BuildOut:
    """The build as the API shows it; `number` (its place in the project) when the
    caller knows it already, as a list does."""
    change = service.exclusion_change(session, build)
    if number is None:
        number = ordinal_in_project(session, Build, build.project_id, build.id)
    return BuildOut.model_validate(build).model_copy(
        update={
            "number": number,
            "exclusions_since": ExclusionChangeOut(**change.__dict__) if change else None,
        }
    )


@router.post("", response_model=BuildOut, status_code=status.HTTP_201_CREATED)
def start_build(project_id: RowId, body: BuildCreate, session: SessionDep, researcher: Changing):
    """Start a CompRF build over the project's labelled items (test items left out). Its
    queries go to raters through the scheduler; answers already held are used first."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    build = jobs.start_build(
        session=session, project=project, params=service.BuildParams(**body.model_dump())
    )
    return _out(session, build)


@router.post("/estimate", response_model=BuildEstimateOut)
def estimate_build(project_id: RowId, body: BuildCreate, session: SessionDep, researcher: Viewing):
    """What a build with these settings would ask of raters, before starting it: the
    answers it is expected to need, and the hours at the project's recent answer rate.
    Starts nothing."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    found = service.estimate(
        session=session,
        project=project,
        params=service.BuildParams(**body.model_dump()),
        answers_per_hour=recent_answers_per_hour(session=session, project=project),
    )
    return BuildEstimateOut(**found.__dict__)


@router.get("", response_model=list[BuildOut])
def list_builds(project_id: RowId, session: SessionDep, researcher: Viewing):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    builds = service.list_builds(session=session, project=project)  # oldest first
    return [_out(session, build, number) for number, build in enumerate(builds, start=1)]


@router.get("/{build_id:int}", response_model=BuildOut)
def get_build(project_id: RowId, build_id: RowId, session: SessionDep, researcher: Viewing):
    """The build with its progress: queries answered and pending, share done per tree."""
    return _out(session, _build(session, researcher, project_id, build_id))


@router.get("/{build_id}/rebuild/estimate", response_model=AgainEstimateOut)
def estimate_rebuild(project_id: RowId, build_id: RowId, session: SessionDep, researcher: Viewing):
    """What building a finished build again would ask of raters, before doing it: the
    answers the new build still needs after folding the answers that count now, and the
    hours at the recent answer rate. Starts nothing."""
    build = _build(session, researcher, project_id, build_id)
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    found = service.estimate_again(
        session=session,
        build=build,
        answers_per_hour=recent_answers_per_hour(session=session, project=project),
    )
    return AgainEstimateOut(**found.__dict__)


@router.post("/{build_id}/rebuild", response_model=BuildOut, status_code=status.HTTP_201_CREATED)
def rebuild(project_id: RowId, build_id: RowId, session: SessionDep, researcher: Changing):
    """Build a finished build again, as it started (items, settings, seed), from the
    answers that count now: raters excluded since are left out, and raters are asked only
    what the remaining answers leave open. The old build and its models stay."""
    build = _build(session, researcher, project_id, build_id)
    return _out(session, jobs.build_again(session=session, build=build))


@router.get("/{build_id}/queries", response_model=list[PendingQuery])
def pending_queries(
    project_id: RowId,
    build_id: RowId,
    session: SessionDep,
    researcher: Viewing,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
):
    """The queries the build waits for, by item key: a client may answer them itself by
    uploading triplets."""
    build = _build(session, researcher, project_id, build_id)
    return service.pending_by_key(session=session, build=build, limit=limit)


def _set(status_to: BuildStatus):
    def change(project_id: RowId, build_id: RowId, session: SessionDep, researcher: Changing):
        build = _build(session, researcher, project_id, build_id)
        return _out(session, service.set_status(session=session, build=build, status=status_to))

    return change


for _verb, _status in (
    ("pause", BuildStatus.paused),
    ("resume", BuildStatus.running),
    ("cancel", BuildStatus.cancelled),
):
    router.add_api_route(
        f"/{{build_id}}/{_verb}",
        _set(_status),
        methods=["POST"],
        response_model=BuildOut,
        name=f"{_verb}_build",
        summary=f"{_verb.capitalize()} the build",
    )


def start_routing(
    project_id: RowId,
    build_id: RowId,
    body: RoutingCreate,
    session: SessionDep,
    researcher: Changing,
):
    """Classify items with a complete build by routing them down its trees: their
    routing queries go to raters (or to you, with ask_raters=false); poll the routing."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    build = service.get_build(session=session, project=project, build_id=build_id)
    return routing.start_routing(
        session=session, project=project, build=build, keys=body.items, ask_raters=body.ask_raters
    )


routings = APIRouter(tags=["builds"], route_class=StrictJSONRoute)


def _routing(session, researcher, project_id: RowId, routing_id: RowId):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return routing.get_routing(session=session, project=project, routing_id=routing_id)


def get_routing(project_id: RowId, routing_id: RowId, session: SessionDep, researcher: Serving):
    """Progress (routing queries pending, items done) and, once complete, labels and
    class shares per item."""
    return _routing(session, researcher, project_id, routing_id)


def routing_queries(project_id: RowId, routing_id: RowId, session: SessionDep, researcher: Serving):
    """The routing queries the routing still needs, by item key."""
    routed = _routing(session, researcher, project_id, routing_id)
    return routing.pending_by_key(session=session, routing=routed)


def answer_routing(
    project_id: RowId,
    routing_id: RowId,
    body: RoutingAnswers,
    session: SessionDep,
    researcher: Changing,
):
    """Answer routing queries yourself; they are stored as triplets and folded in at once."""
    routed = _routing(session, researcher, project_id, routing_id)
    return routing.add_answers(session=session, routing=routed, answers=body.answers)


# Until 2026-11 a routing was called a "prediction" (its paths /predictions/…): those paths
# still answer, marked deprecated, for clients and poll links written against them.
ROUTING_ROUTES = (  # (router, path, endpoint, method, response model, status)
    (router, "/{build_id}/{noun}", start_routing, "POST", RoutingOut, status.HTTP_201_CREATED),
    (
        routings,
        "/projects/{project_id}/{noun}/{routing_id}",
        get_routing,
        "GET",
        RoutingOut,
        status.HTTP_200_OK,
    ),
    (
        routings,
        "/projects/{project_id}/{noun}/{routing_id}/queries",
        routing_queries,
        "GET",
        list[PendingQuery],
        status.HTTP_200_OK,
    ),
    (
        routings,
        "/projects/{project_id}/{noun}/{routing_id}/answers",
        answer_routing,
        "POST",
        RoutingOut,
        status.HTTP_200_OK,
    ),
)
for _noun, _deprecated in (("routings", False), ("predictions", True)):
    for _router, _path, _endpoint, _method, _model, _status_code in ROUTING_ROUTES:
        _router.add_api_route(
            _path.replace("{noun}", _noun),
            _endpoint,
            methods=[_method],
            response_model=_model,
            status_code=_status_code,
            name=_endpoint.__name__ + ("_as_prediction" if _deprecated else ""),
            deprecated=_deprecated,
        )
