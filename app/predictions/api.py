"""Predictions, embeddings, distances and neighbours from a project's models."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import JSONResponse

from app.auth.deps import Exporting, Serving
from app.builds import routing
from app.builds.schemas import RoutingOut
from app.core import parquet
from app.core.deps import SessionDep
from app.core.errors import Conflict, NotFound, ServiceError
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.predictions import service
from app.predictions.schemas import (
    ChoicesOut,
    ChoicesRequest,
    DistancesOut,
    DistancesRequest,
    NeighborsOut,
    PredictOut,
    PredictRequest,
    RoutingStarted,
)
from app.projects.service import get_project
from app.training import kinds
from app.training.service import build_of, get_model

router = APIRouter(
    prefix="/projects/{project_id}/models/{model_id}",
    tags=["predictions"],
    route_class=StrictJSONRoute,
)


def _model(session, researcher, project_id: RowId, model_id: RowId):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return project, get_model(session=session, project=project, model_id=model_id)


@router.post(
    "/predict",
    response_model=PredictOut,
    responses={202: {"model": RoutingStarted, "description": "CompRF: routing started"}},
)
def predict(
    project_id: RowId,
    model_id: RowId,
    body: PredictRequest,
    request: Request,
    session: SessionDep,
    researcher: Serving,
):
    """Labels, class probabilities and support for items in the project (`items`) and
    for new ones (`new_items`: their triplets against known items, or their features).
    A CompRF model routes the items instead: the answer is a pending routing to poll."""
    project, model = _model(session, researcher, project_id, model_id)
    if not body.items and not body.new_items:
        raise ServiceError("items and new_items are both empty: name at least one item")
    served = service.serving(session, model, body.version)
    if kinds.of(model.kind).from_build:
        if body.new_items:
            raise ServiceError(
                "new_items: a CompRF forest routes only items in the project; add them as "
                "items, then predict them by key"
            )
        build = build_of(session, model)
        if build is None:
            raise NotFound(f"model {model.id}'s build no longer exists")
        routed = routing.start_routing(
            session=session,
            project=project,
            build=build,
            keys=body.items,
            ask_raters=body.ask_raters,
        )
        started = RoutingStarted(
            model_id=model.id,
            version=served.version.number,
            routing=RoutingOut.model_validate(routed),
            poll=str(
                request.url_for("get_routing", project_id=project.id, routing_id=routed.id).path
            ),
        )
        return JSONResponse(started.model_dump(mode="json"), status_code=status.HTTP_202_ACCEPTED)
    rows = []
    if body.items:
        rows += service.predict_known(served, body.items)
    if body.new_items:
        rows += service.predict_new(served, [item.model_dump() for item in body.new_items])
    return {
        "model_id": model.id,
        "version": served.version.number,
        "kind": model.kind.value,
        "predictions": rows,
    }


@router.get(
    "/embedding",
    responses={
        200: {
            "description": "JSON {model_id, version, dimension, keys, coordinates} or CSV "
            "(key, dim_0, dim_1, …)",
            "content": {"application/json": {}, "text/csv": {}, parquet.MEDIA_TYPE: {}},
        }
    },
)
def embedding(
    project_id: RowId,
    model_id: RowId,
    session: SessionDep,
    researcher: Serving,
    format: Annotated[Literal["json", "csv", "parquet"], Query()] = "json",
    version: Annotated[RowId | None, Query()] = None,
):
    """Every item's coordinates: t-ETE's embedding, or DisDF's learnt representation
    (Parquet: key, dim_0, dim_1, …, answered; the model and version in its metadata)."""
    _, model = _model(session, researcher, project_id, model_id)
    served = service.serving(session, model, version)
    if kinds.of(model.kind).from_build:
        raise ServiceError("a CompRF forest gives no embedding: t-ETE and DisDF models do")
    body = service.embedding_body(served, model.id, format)
    if format in ("csv", "parquet"):
        return Response(
            body,
            media_type="text/csv" if format == "csv" else parquet.MEDIA_TYPE,
            headers={
                "Content-Disposition": f'attachment; filename="model-{model.id}-'
                f'v{served.version.number}-embedding.{format}"'
            },
        )
    return Response(body, media_type="application/json")


@router.get(
    "/predictions/export",
    responses={
        200: {
            "description": "Every item the serving version knows: key, label (empty where "
            "the top classes tie), the label's probability, support",
            "content": {"text/csv": {}, "application/json": {}, parquet.MEDIA_TYPE: {}},
        }
    },
)
def export_predictions(
    project_id: RowId,
    model_id: RowId,
    session: SessionDep,
    researcher: Exporting,
    format: Annotated[Literal["json", "csv", "parquet"], Query()] = "csv",
    version: Annotated[RowId | None, Query()] = None,
):
    """The serving version's label for every item it knows, as a download; for a CompRF
    forest, the labels of its newest complete routing (the items it routed)."""
    _, model = _model(session, researcher, project_id, model_id)
    media_type = {
        "json": "application/json",
        "csv": "text/csv; charset=utf-8",
        "parquet": parquet.MEDIA_TYPE,
    }[format]
    if kinds.of(model.kind).from_build:
        build = build_of(session, model)
        routed = routing.newest_routing(session, build.id, complete=True) if build else None
        if build is None or routed is None:
            raise Conflict(
                f"model {model.id} has labelled nothing yet: a CompRF forest labels items by "
                "routing them through raters (the Models page's 'Label test and unlabelled "
                "items', or POST …/predict), and its newest complete routing is exported"
            )
        return Response(
            service.export_routed(routed, int(build.params.get("n_trees", 0)), format),
            media_type=media_type,
            headers={
                "Content-Disposition": f'attachment; filename="model-{model.id}-'
                f'routing-{routed.id}-predictions.{format}"'
            },
        )
    served = service.serving(session, model, version)
    return Response(
        service.export_predictions(served, format),
        media_type=media_type,
        headers={
            "Content-Disposition": f'attachment; filename="model-{model.id}-'
            f'v{served.version.number}-predictions.{format}"'
        },
    )


@router.post("/distances", response_model=DistancesOut)
def distances(
    project_id: RowId,
    model_id: RowId,
    body: DistancesRequest,
    session: SessionDep,
    researcher: Serving,
):
    """Learnt distances between pairs of items (t-ETE, SMERF, DisDF)."""
    _, model = _model(session, researcher, project_id, model_id)
    served = _metric_model(session, model, body.version)
    return {
        "model_id": model.id,
        "version": served.version.number,
        "distances": service.distances(served, body.pairs),
    }


@router.post("/choices", response_model=ChoicesOut)
def choices(
    project_id: RowId,
    model_id: RowId,
    body: ChoicesRequest,
    session: SessionDep,
    researcher: Serving,
):
    """Each item's probability of being chosen on screens you describe (a choice model):
    the odd one of an odd-one-out, the first pick of a rank screen, the closer of a
    triplet's two candidates."""
    _, model = _model(session, researcher, project_id, model_id)
    served = _metric_model(session, model, body.version)
    found = service.choice_probabilities(served, body.screens)
    return {
        "model_id": model.id,
        "version": served.version.number,
        "screens": [{"probabilities": probabilities} for probabilities in found],
    }


@router.get("/neighbors", response_model=NeighborsOut)
def neighbors(
    project_id: RowId,
    model_id: RowId,
    session: SessionDep,
    researcher: Serving,
    item: Annotated[str, Query(min_length=1, description="Item key")],
    k: Annotated[int, Query(ge=1, le=1000)] = 10,
    version: Annotated[RowId | None, Query()] = None,
):
    """The k items nearest to `item` by the learnt distance, nearest first."""
    _, model = _model(session, researcher, project_id, model_id)
    served = _metric_model(session, model, version)
    return {
        "model_id": model.id,
        "version": served.version.number,
        "item": item,
        "neighbors": service.neighbors(served, item, k),
    }


def _metric_model(session, model, version):
    if kinds.of(model.kind).from_build:
        raise ServiceError(
            f"a CompRF forest gives no distances: {kinds.serving_distances()} models do"
        )
    return service.serving(session, model, version)
