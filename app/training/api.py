"""Models over REST: set one up, train it (or let it refit itself), read its versions."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy.orm import Session

from app.auth.deps import Changing, Serving, Viewing
from app.core.deps import SessionDep
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.models import LearnedModel, ModelVersion
from app.projects.service import get_project
from app.training import service
from app.training.ceiling import study_ceiling
from app.training.gain import gain_state
from app.training.kinds import checked_params
from app.training.schemas import (
    CeilingOut,
    GainOut,
    LabelledShare,
    LabellingOut,
    LabellingStandingOut,
    ModelCreate,
    ModelOut,
    ModelUpdate,
    VersionOut,
)
from app.training.standings import LabellingStanding, labelling_standings

router = APIRouter(
    prefix="/projects/{project_id}/models", tags=["models"], route_class=StrictJSONRoute
)
# Beside the models, not among them: /models/labelling would read as a model's id.
labelling_router = APIRouter(
    prefix="/projects/{project_id}", tags=["models"], route_class=StrictJSONRoute
)


def version_out(session: Session, version: ModelVersion | None) -> VersionOut | None:
    if version is None:
        return None
    progress, message = service.version_progress(session, version)
    return VersionOut.model_validate(
        {
            **{
                name: getattr(version, name)
                for name in VersionOut.model_fields
                if name not in ("progress", "message", "converged")
            },
            "progress": progress,
            "message": message,
            "converged": (version.metrics or {}).get("converged"),
        }
    )


def model_out(session: Session, model: LearnedModel) -> ModelOut:
    latest, serving = service.latest_and_serving(session, model.id)
    return ModelOut(
        id=model.id,
        project_id=model.project_id,
        name=model.name,
        kind=model.kind,
        params=model.params,
        auto_refit=model.auto_refit,
        refit_growth=model.refit_growth,
        min_answers=model.min_answers,
        build_id=model.build_id,
        arm=model.arm,
        created_at=model.created_at,
        serving=version_out(session, serving),
        latest=version_out(session, latest),
    )


def _model(session, researcher, project_id: RowId, model_id: RowId) -> LearnedModel:
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return service.get_model(session=session, project=project, model_id=model_id)


@router.post("", response_model=ModelOut, status_code=status.HTTP_201_CREATED)
def create_model(project_id: RowId, body: ModelCreate, session: SessionDep, researcher: Changing):
    """Set up a learner on the project. Passive learners (TripletBoost, t-ETE) fit now and
    refit by themselves as answers grow; SMERF and DisDF learn from item features; a
    CompRF model follows its build and predicts by routing once the build is complete."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    model = service.set_up_model(session=session, project=project, body=body)
    return model_out(session, model)


@router.get("", response_model=list[ModelOut])
def list_models(project_id: RowId, session: SessionDep, researcher: Serving):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return [
        model_out(session, model) for model in service.list_models(session=session, project=project)
    ]


@labelling_router.get("/ceiling", response_model=CeilingOut)
def ceiling(project_id: RowId, session: SessionDep, researcher: Viewing):
    """The study's noise ceiling: how often a rater's choice on a screen others answered
    too is their majority's, with a 95 % bootstrap interval over screens; the most held-out
    choice accuracy any model can expect (the Models page shows it beside each model's)."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return study_ceiling(session, project)


@labelling_router.get("/labelling", response_model=LabellingOut)
def labelling(project_id: RowId, session: SessionDep, researcher: Viewing):
    """Which model labels best now, as the Models page shows it: each model's accuracy
    and coverage on the test split and by cross-validation."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    standings, best, measure = labelling_standings(session=session, project=project)

    def share(standing: LabellingStanding, measure: str) -> LabelledShare | None:
        found = getattr(standing, measure)
        if found is None:
            return None
        accuracy, coverage = found
        return LabelledShare(accuracy=accuracy, coverage=coverage, right=standing.right(measure))

    return LabellingOut(
        standings=[
            LabellingStandingOut(
                model_id=standing.model.id,
                name=standing.model.name,
                kind=standing.model.kind,
                answers=standing.answers,
                test=share(standing, "test"),
                cv=share(standing, "cv"),
            )
            for standing in standings
        ],
        best_model_id=best.model.id if best is not None else None,
        measure=measure,
    )


@router.get("/{model_id}", response_model=ModelOut)
def get_model(project_id: RowId, model_id: RowId, session: SessionDep, researcher: Serving):
    """The model, the version that serves, and the newest one with its progress."""
    return model_out(session, _model(session, researcher, project_id, model_id))


@router.patch("/{model_id}", response_model=ModelOut)
def update_model(
    project_id: RowId,
    model_id: RowId,
    body: ModelUpdate,
    session: SessionDep,
    researcher: Changing,
):
    """Change the refit policy or the parameters (the next version uses them)."""
    model = _model(session, researcher, project_id, model_id)
    changes = body.model_dump(exclude_unset=True)
    if "params" in changes:
        changes["params"] = checked_params(model.kind, {**model.params, **changes["params"]})
    service.update_policy(session=session, model=model, changes=changes)
    return model_out(session, model)


@router.delete("/{model_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_model(project_id: RowId, model_id: RowId, session: SessionDep, researcher: Changing):
    """Delete the model and every version; a fit in progress is cancelled."""
    service.delete_model(session=session, model=_model(session, researcher, project_id, model_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{model_id}/train", response_model=VersionOut, status_code=status.HTTP_202_ACCEPTED)
def train(project_id: RowId, model_id: RowId, session: SessionDep, researcher: Changing):
    """Fit a new version on the answers held now (a fit already queued or running is
    returned instead of a second one)."""
    model = _model(session, researcher, project_id, model_id)
    version = service.request_training(session=session, model=model, trigger="manual")
    return version_out(session, version)


@router.post("/{model_id}/cancel", response_model=VersionOut)
def cancel(project_id: RowId, model_id: RowId, session: SessionDep, researcher: Changing):
    """Stop the fit queued or running; the version that served keeps serving."""
    model = _model(session, researcher, project_id, model_id)
    return version_out(session, service.cancel_training(session=session, model=model))


@router.get("/{model_id}/gain", response_model=GainOut)
def active_gain(project_id: RowId, model_id: RowId, session: SessionDep, researcher: Viewing):
    """What asking actively saved, from the study's arms (one asking only at random):
    each arm's held-out error against its answers, and each active arm's gain (the
    answers the random arm needs to reach its error) with a 95 % bootstrap interval.
    Measured once per ready version by the worker: until then `status` is `queued` or
    `computing`, with its progress; `unavailable` says why it cannot be measured."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    model = service.get_model(session=session, project=project, model_id=model_id)
    return gain_state(session, project, model)


@router.get("/{model_id}/versions", response_model=list[VersionOut])
def list_versions(project_id: RowId, model_id: RowId, session: SessionDep, researcher: Serving):
    """Every version, newest first."""
    model = _model(session, researcher, project_id, model_id)
    return [
        version_out(session, version) for version in service.versions(session=session, model=model)
    ]


@router.get("/{model_id}/versions/{number}", response_model=VersionOut)
def get_version(
    project_id: RowId,
    model_id: RowId,
    number: RowId,
    session: SessionDep,
    researcher: Serving,
):
    model = _model(session, researcher, project_id, model_id)
    return version_out(session, service.get_version(session=session, model=model, number=number))
