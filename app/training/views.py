"""The workspace's models: each model's status with a live progress bar while it fits,
its metrics per version and learning curve; create, train and cancel from the page; and
a t-ETE model's embedding as an interactive scatter."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from app.auth.deps import ChangingPage, ViewingPage
from app.builds.service import list_builds
from app.core.db import roll_back
from app.core.deps import SessionDep
from app.core.errors import ServiceError
from app.core.fields import RowId
from app.core.forms import read_model_form
from app.core.pages import render as page
from app.core.pages import render_page_or_part
from app.core.routes import StrictJSONRoute
from app.projects.service import get_project
from app.training import kinds, service
from app.training.cards import model_cards
from app.training.ceiling import study_ceiling
from app.training.gain import page_gains
from app.training.schemas import ModelCreate
from app.training.standings import labelling_standings

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)


def _models_page(
    request: Request,
    session,
    researcher,
    project,
    *,
    form: dict | None = None,
    errors: dict | None = None,
    status_code: int = 200,
) -> Response:
    cards = model_cards(session=session, project=project)
    standings, best, measure = labelling_standings(session=session, project=project)
    gains = page_gains(session, project, [card.model for card in cards])
    context = {
        "gains": gains,
        "labelling": {"standings": standings, "best": best, "measure": measure},
        "ceiling": study_ceiling(session, project),
        "researcher": researcher,
        "project": project,
        "tab": "models",
        "cards": cards,
        "live": any(card.live for card in cards)
        or any(
            gain["status"] in ("queued", "computing") or gain.get("progress") is not None
            for gain in gains.values()
        ),
        "kinds": {learner.kind: learner.title for learner in kinds.every()},
        "refitting": kinds.in_words([learner for learner in kinds.every() if learner.passive]),
        "from_features": kinds.in_words(
            [learner for learner in kinds.every() if learner.learns_from_features]
        ),
        "builds": list_builds(session=session, project=project),
        "defaults": {
            learner.name: json.dumps(learner.params().model_dump(), indent=None)
            for learner in kinds.every()
        },
        "form": form or {},
        "errors": errors or {},
    }
    return render_page_or_part(
        request, "training/models.html", "training/_models.html", context, status_code
    )


@router.get("/projects/{project_id}/models", response_class=HTMLResponse, name="models_page")
def models_page(project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return _models_page(request, session, researcher, project)


@router.post("/projects/{project_id}/models", response_class=HTMLResponse, name="create_model_form")
async def create_model(
    project_id: RowId, request: Request, session: SessionDep, researcher: ChangingPage
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    submitted = await read_model_form(
        request,
        ModelCreate,
        fields=("name", "kind", "params", "build_id", "arm", "min_answers", "auto_refit"),
        checkboxes=("auto_refit",),
        json_fields=("params",),
    )
    body, form, errors = submitted.body, submitted.shown, submitted.errors
    if body is None:
        return _models_page(
            request, session, researcher, project, form=form, errors=errors, status_code=422
        )
    try:
        service.set_up_model(session=session, project=project, body=body)
    except ServiceError as refused:
        roll_back(session)
        detail = refused.detail
        if isinstance(detail, list):  # the parameters' schema, field by field
            detail = "; ".join(
                f"{'.'.join(str(p) for p in entry.get('loc', [])[2:]) or 'params'}: "
                f"{entry.get('msg')}"
                for entry in detail
            )
        return _models_page(
            request,
            session,
            researcher,
            project,
            form=form,
            errors={"form": str(detail)},
            status_code=refused.status_code,
        )
    return RedirectResponse(
        request.url_for("models_page", project_id=project_id).path, status_code=303
    )


@router.post("/projects/{project_id}/models/{model_id}/{action}", name="model_action")
def model_action(
    project_id: RowId,
    model_id: RowId,
    action: str,
    request: Request,
    session: SessionDep,
    researcher: ChangingPage,
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    model = service.get_model(session=session, project=project, model_id=model_id)
    try:
        if action == "train":
            service.request_training(session=session, model=model, trigger="manual")
        elif action == "cancel":
            service.cancel_training(session=session, model=model)
        elif action == "label":
            service.route_wanted_items(session=session, project=project, model=model)
        elif action == "delete":
            service.delete_model(session=session, model=model)
        else:
            raise ServiceError(
                f"a model can be trained, cancelled, asked to label or deleted, not '{action[:20]}'"
            )
    except ServiceError as refused:
        # Said on the model's own card, where the button was pressed.
        roll_back(session)
        return _models_page(
            request,
            session,
            researcher,
            project,
            errors={"action": {"model_id": model_id, "message": str(refused.detail)}},
            status_code=refused.status_code,
        )
    return RedirectResponse(
        request.url_for("models_page", project_id=project_id).path, status_code=303
    )


@router.get(
    "/projects/{project_id}/models/{model_id}/embedding",
    response_class=HTMLResponse,
    name="embedding_page",
)
def embedding_page(
    project_id: RowId,
    model_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ViewingPage,
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    model = service.get_model(session=session, project=project, model_id=model_id)
    ready = service.newest_ready(session, model.id)
    return page(
        request,
        "training/embedding.html",
        {
            "researcher": researcher,
            "project": project,
            "tab": "models",
            "model": model,
            "ready": ready,
            "kind_name": kinds.of(model.kind).title,
        },
    )
