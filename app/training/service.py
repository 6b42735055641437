"""Models on a project: set them up, fit versions in the worker, refit as answers grow.

A fit reads a snapshot of the project (items in id order, answers up to a committed
cut-off, excluded raters left out), calls the fitter of its kind, and stores the artifact
and metrics on its `ModelVersion`. The newest ready version serves. Passive models
refit by themselves (`refit_due`) once the answers grew by the model's `refit_growth`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from app.builds import routing
from app.core.db import rows_changed
from app.core.errors import Conflict, NotFound, ServiceError
from app.models import (
    Build,
    BuildStatus,
    Job,
    JobStatus,
    LearnedModel,
    ModelKind,
    ModelVersion,
    Project,
    Routing,
    RoutingStatus,
    Triplet,
    VersionStatus,
)
from app.models._types import utcnow
from app.training import kinds
from app.training.fitted import Fitted
from app.training.kinds import checked_params, pack_matrix
from app.training.schemas import ModelCreate
from app.triplets.log import (
    readable_bound,
)
from app.worker import queue

TRAIN_JOB = "train_model"
UNFINISHED = (VersionStatus.queued, VersionStatus.training)


# -- models ------------------------------------------------------------------------------


def create_model(
    *,
    session: Session,
    project: Project,
    name: str,
    kind: ModelKind,
    params: dict[str, Any],
    auto_refit: bool,
    refit_growth: float,
    min_answers: int,
    build_id: int | None = None,
    inputs: bytes | None = None,
    train_now: bool = True,
    arm: str | None = None,
) -> LearnedModel:
    taken = session.scalar(
        select(LearnedModel.id).where(
            LearnedModel.project_id == project.id, LearnedModel.name == name
        )
    )
    if taken is not None:
        raise Conflict(f"project {project.id} already has a model named '{name}' (id {taken})")
    build = None
    learner = kinds.of(kind)
    if learner.from_build:
        build = session.get(Build, build_id) if build_id is not None else None
        if build is None or build.project_id != project.id:
            raise NotFound(f"no build {build_id} in project {project.id}: a CompRF model names one")
    elif build_id is not None:
        raise ServiceError(f"build_id names the build of a CompRF model; a {kind} model has none")
    model = LearnedModel(
        project_id=project.id,
        name=name,
        kind=kind,
        params=params,
        auto_refit=auto_refit and learner.passive,
        refit_growth=refit_growth,
        min_answers=min_answers,
        build_id=build_id,
        inputs=inputs,
        arm=arm,
    )
    session.add(model)
    session.flush()
    if build is not None:
        _follow_build(session, model, build)
    elif train_now and too_few_answers(session, model) is None:
        # Too few answers yet: the model waits (the refit check fits it once they come,
        # or "Train now"), rather than recording a fit that fails.
        request_training(session=session, model=model, trigger="created")
    return model


def answers_since(session: Session, project_id: int, after: int, arm: str | None = None) -> int:
    """The project's answers after id `after` that a fit reads (with `arm`: that arm's)."""
    where = [
        Triplet.project_id == project_id,
        Triplet.id > after,
        Triplet.id <= readable_bound(session, project_id),
        Triplet.is_test.is_(False),
    ]
    if arm is not None:
        where.append(Triplet.arm == arm)
    return session.scalar(select(func.count()).where(*where)) or 0


def too_few_answers(session: Session, model: LearnedModel) -> str | None:
    """Why a fit of `model` would fail for want of answers now, or None."""
    learner = kinds.of(model.kind)
    needed = learner.answers_needed
    if needed is None:
        return None
    held = answers_since(session, model.project_id, 0, model.arm)
    if held >= needed:
        return None
    return (
        f"{learner.label} needs at least {needed} answer{'s' if needed > 1 else ''} "
        f"to fit; project {model.project_id} has {held}: it fits once raters have answered"
    )


def _matrix_blob(
    body: ModelCreate, params: dict, given: tuple[list[str], np.ndarray] | None
) -> bytes | None:
    """SMERF's uploaded dissimilarity matrix (the request's, or `given` as keys and an
    array), checked and packed (None: none)."""
    wants = kinds.of(body.kind).takes_matrix(params)
    if body.matrix is None and given is None:
        if wants:
            raise ServiceError("matrix: SMERF with dissimilarity 'matrix' needs the matrix")
        return None
    if not wants:
        raise ServiceError("matrix: only a SMERF model with dissimilarity 'matrix' takes one")
    if given is not None:
        keys, matrix = given
    elif body.matrix is not None:
        keys, rows = body.matrix.keys, body.matrix.values
        bad = next((i for i, row in enumerate(rows) if len(row) != len(keys)), None)
        if len(rows) != len(keys) or bad is not None:
            where = f"row {bad}" if bad is not None else f"{len(rows)} rows"
            raise ServiceError(f"matrix.values: must be {len(keys)} x {len(keys)}; {where} is not")
        matrix = np.array(rows, dtype=np.float64)
    if len(set(keys)) != len(keys):
        raise ServiceError("matrix.keys: an item key repeats")
    if matrix.shape != (len(keys), len(keys)):
        raise ServiceError(f"matrix.values: must be {len(keys)} x {len(keys)}")
    if not np.all(np.isfinite(matrix)) or np.any(matrix < 0):
        raise ServiceError("matrix.values: dissimilarities must be finite and non-negative")
    if not np.allclose(matrix, matrix.T) or np.any(np.diag(matrix) != 0):
        raise ServiceError("matrix.values: must be symmetric with a zero diagonal")
    return pack_matrix(keys, matrix)


def set_up_model(
    *,
    session: Session,
    project: Project,
    body: ModelCreate,
    matrix: tuple[list[str], np.ndarray] | None = None,
) -> LearnedModel:
    """A model as a request describes it (the API's, the workspace form's or an
    archive's), checked against the project: its parameters, the build or embedding it
    names, features. An archive gives SMERF's matrix as an array (`matrix`)."""
    params = checked_params(body.kind, body.params)
    learner = kinds.of(body.kind)
    if learner.from_build and body.build_id is None:
        raise ServiceError(f"build_id: a {learner.label} model comes from a build; name it")
    check_embedding_source(session=session, project_id=project.id, kind=body.kind, params=params)
    if learner.learns_from_features and not project.feature_dim:
        raise ServiceError(
            f"kind: {body.kind.value} learns from item features, and the items of "
            f"project {project.id} have none"
        )
    if body.arm is not None:
        names = [arm["name"] for arm in project.arms or []]
        if learner.from_build:
            raise ServiceError(
                f"arm: a {learner.label} model comes from its build, which asks every arm"
            )
        if body.arm not in names:
            have = f"its arms: {', '.join(names)}" if names else "it has none"
            raise ServiceError(f"arm: the study has no arm {body.arm!r} ({have})")
    return create_model(
        session=session,
        project=project,
        name=body.name,
        kind=body.kind,
        params=params,
        auto_refit=body.auto_refit,
        refit_growth=body.refit_growth,
        min_answers=body.min_answers,
        build_id=body.build_id,
        inputs=_matrix_blob(body, params, matrix),
        train_now=body.train,
        arm=body.arm,
    )


def list_models(*, session: Session, project: Project) -> list[LearnedModel]:
    return list(
        session.scalars(
            select(LearnedModel)
            .where(LearnedModel.project_id == project.id)
            .order_by(LearnedModel.id)
        )
    )


def get_model(*, session: Session, project: Project, model_id: int) -> LearnedModel:
    model = session.get(LearnedModel, model_id)
    if model is None or model.project_id != project.id:
        raise NotFound(f"no model {model_id} in project {project.id}")
    return model


def check_embedding_source(
    *, session: Session, project_id: int, kind: ModelKind, params: dict[str, Any]
) -> None:
    """A model learning from another's embedding (SMERF's D) names a model of its own
    project whose embedding places the items by their answers (t-ETE): the one check for
    creating, changing and importing a model. Another project's model gets the same
    answer as none at all, so nothing tells whether it exists."""
    learner = kinds.of(kind)
    source = learner.referenced_model(params)
    if source is None:
        return
    usable = isinstance(source, int) and not isinstance(source, bool)
    found = session.get(LearnedModel, source) if usable else None
    if found is None or found.project_id != project_id or not kinds.of(found.kind).embeds_answers:
        embedders = " or ".join(other.label for other in kinds.every() if other.embeds_answers)
        raise ServiceError(
            f"params.{learner.model_reference}: name a {embedders} model of this project "
            f"(got {source!r})"
        )


def update_policy(*, session: Session, model: LearnedModel, changes: dict[str, Any]) -> None:
    if "params" in changes:
        check_embedding_source(
            session=session, project_id=model.project_id, kind=model.kind, params=changes["params"]
        )
    if changes.get("auto_refit") and not kinds.of(model.kind).passive:
        raise ServiceError(
            f"auto_refit: only the passive learners ({', '.join(kinds.passive())}) refit as "
            f"answers grow; a {model.kind.value} model is trained on request"
        )
    for name, value in changes.items():
        setattr(model, name, value)
    session.flush()


def delete_model(*, session: Session, model: LearnedModel) -> None:
    """The model and every version; a fit in progress is cancelled. A t-ETE model a SMERF
    model learns from stays until that one goes (its refits would have nothing to read)."""
    learners = [
        other.name
        for other in list_models(
            session=session, project=session.get_one(Project, model.project_id)
        )
        if kinds.of(other.kind).referenced_model(other.params) == model.id
    ]
    if learners:
        raise Conflict(
            f"model {model.id} ({model.name}) is the embedding SMERF model "
            f"{', '.join(repr(name) for name in learners)} learns from: delete that first"
        )
    for version in unfinished_versions(session, model.id):
        if version.job_id is not None:
            _cancel_job(session, version.job_id)
    session.delete(model)
    session.flush()


# -- versions ----------------------------------------------------------------------------


def versions(*, session: Session, model: LearnedModel) -> list[ModelVersion]:
    return list(
        session.scalars(
            select(ModelVersion)
            .where(ModelVersion.model_id == model.id)
            .order_by(ModelVersion.number.desc())
        )
    )


def get_version(*, session: Session, model: LearnedModel, number: int) -> ModelVersion:
    version = session.scalar(
        select(ModelVersion).where(ModelVersion.model_id == model.id, ModelVersion.number == number)
    )
    if version is None:
        raise NotFound(f"model {model.id} has no version {number}")
    return version


def unfinished_versions(session: Session, model_id: int) -> list[ModelVersion]:
    return list(
        session.scalars(
            select(ModelVersion).where(
                ModelVersion.model_id == model_id, ModelVersion.status.in_(UNFINISHED)
            )
        )
    )


def latest_version(session: Session, model_id: int) -> ModelVersion | None:
    return session.scalar(
        select(ModelVersion)
        .where(ModelVersion.model_id == model_id)
        .order_by(ModelVersion.number.desc())
        .limit(1)
    )


def latest_and_serving(
    session: Session, model_id: int
) -> tuple[ModelVersion | None, ModelVersion | None]:
    """The newest version and the newest ready one, read in one statement: read apart, a
    fit that finishes between the two reads (PostgreSQL reads each statement afresh) shows
    its version ready as the latest while nothing serves."""
    numbers = select(func.max(ModelVersion.number)).where(ModelVersion.model_id == model_id)
    rows = session.scalars(
        select(ModelVersion)
        .where(
            ModelVersion.model_id == model_id,
            or_(
                ModelVersion.number == numbers.scalar_subquery(),
                ModelVersion.number
                == numbers.where(ModelVersion.status == VersionStatus.ready).scalar_subquery(),
            ),
        )
        .execution_options(populate_existing=True)
    ).all()
    if not rows:
        return None, None
    latest = max(rows, key=lambda version: version.number)
    ready = [version for version in rows if version.status == VersionStatus.ready]
    return latest, max(ready, key=lambda version: version.number) if ready else None


def newest_ready(session: Session, model_id: int) -> ModelVersion | None:
    return session.scalar(
        select(ModelVersion)
        .where(ModelVersion.model_id == model_id, ModelVersion.status == VersionStatus.ready)
        .order_by(ModelVersion.number.desc())
        .limit(1)
    )


def _new_version(session: Session, model: LearnedModel, trigger: str) -> ModelVersion:
    number = (
        session.scalar(
            select(func.max(ModelVersion.number)).where(ModelVersion.model_id == model.id)
        )
        or 0
    ) + 1
    version = ModelVersion(
        model_id=model.id, number=number, trigger=trigger, params=dict(model.params)
    )
    session.add(version)
    session.flush()
    return version


def build_of(session: Session, model: LearnedModel) -> Build | None:
    """A CompRF model's build (None for other kinds, or once the build is deleted)."""
    return session.get(Build, model.build_id) if model.build_id else None


def route_wanted_items(*, session: Session, project: Project, model: LearnedModel) -> Routing:
    """A CompRF model labels the project's test and unlabelled items by routing them down
    its forest, its questions asked of raters first; a routing already under way is
    returned instead of starting a second."""
    if not kinds.of(model.kind).from_build:
        raise Conflict(f"model {model.id} is not a CompRF forest: it labels items without routing")
    build = build_of(session, model)
    if build is None:
        raise NotFound(f"model {model.id}'s build no longer exists")
    under_way = routing.newest_routing(session, build.id)
    if under_way is not None and under_way.status is RoutingStatus.routing:
        return under_way
    return routing.start_routing(session=session, project=project, build=build, keys=None)


def request_training(*, session: Session, model: LearnedModel, trigger: str) -> ModelVersion:
    """Queue a fit of `model` on the answers held when it starts; a fit already queued
    or running is returned instead of starting a second."""
    if kinds.of(model.kind).from_build:
        raise Conflict(
            f"model {model.id} is a CompRF forest: it grows with its build "
            f"({model.build_id}), not by training"
        )
    if session.get_bind().dialect.name == "postgresql":
        # Serialise with the periodic refit check and other requests on this model.
        session.execute(
            select(LearnedModel.id).where(LearnedModel.id == model.id).with_for_update()
        )
    settle_ended_fits(session, model.id)
    running = unfinished_versions(session, model.id)
    if running:
        return running[0]
    wanting = too_few_answers(session, model)
    if wanting is not None:
        raise Conflict(wanting)
    version = _new_version(session, model, trigger)
    job = queue.enqueue(
        session=session,
        kind=TRAIN_JOB,
        project_id=model.project_id,
        params={"version_id": version.id},
    )
    version.job_id = job.id
    session.flush()
    return version


def cancel_training(*, session: Session, model: LearnedModel) -> ModelVersion:
    """Cancel the fit queued or running, at once: the version is cancelled now and never
    serves (a running fit stops at its next step). A fit that already ended is a 409
    that says how it ended."""
    settle_ended_fits(session, model.id)
    running = unfinished_versions(session, model.id)
    if not running:
        last = latest_version(session, model.id)
        if last is None:
            raise Conflict(f"model {model.id} has no fit to cancel: it was never trained")
        raise Conflict(
            f"too late to cancel: model {model.id}'s newest fit, version {last.number}, "
            f"already ended {last.status.value} ({last.message})"
        )
    version = running[0]
    if version.job_id is not None:
        _cancel_job(session, version.job_id)
    # When the fit stored its model first, the cancel is too late and says so.
    cancelled = move_on(
        session,
        version.id,
        VersionStatus.cancelled,
        "cancelled before it started"
        if version.status is VersionStatus.queued
        else "cancelled while training",
        # Automatic refits measure growth from here: a cancel is not undone 5 s later.
        answers_cutoff=readable_bound(session, model.project_id),
    )
    session.refresh(version)
    if not cancelled:
        raise Conflict(
            f"too late to cancel: version {version.number} of model {model.id} already "
            f"ended {version.status.value} ({version.message})"
        )
    return version


def move_on(
    session: Session, version_id: int, status: VersionStatus, message: str, **values: Any
) -> bool:
    """Move a version that is still queued or training on to `status`; False if it had
    ended already. Every change of an unfinished version goes through this one
    compare-and-set (a cancel here, the fit's steps in app/training/runs.py), so a cancel
    and the fit's last step never both win."""
    changed = rows_changed(
        session.execute(
            update(ModelVersion)
            .where(ModelVersion.id == version_id, ModelVersion.status.in_(UNFINISHED))
            .values(status=status, message=message, **values)
            .execution_options(synchronize_session=False)
        )
    )
    return bool(changed)


def settle_ended_fits(session: Session, model_id: int | None = None) -> None:
    """Versions still queued or training whose job has ended take the job's outcome: a
    job cancelled before its handler ran, or failed for good because its workers kept
    dying, would otherwise leave the version (and every later train) waiting forever."""
    query = (
        select(ModelVersion, Job, LearnedModel.project_id)
        .join(Job, Job.id == ModelVersion.job_id)
        .join(LearnedModel, LearnedModel.id == ModelVersion.model_id)
        .where(ModelVersion.status.in_(UNFINISHED), Job.status.in_(queue.FINISHED))
    )
    if model_id is not None:
        query = query.where(ModelVersion.model_id == model_id)
    for version, job, project_id in session.execute(query).all():
        # Automatic refits count growth from here: a fit that killed its workers (out of
        # memory, say) is not queued again until the answers grow.
        version.answers_cutoff = max(version.answers_cutoff, readable_bound(session, project_id))
        if job.status is JobStatus.cancelled:
            version.status, version.message = VersionStatus.cancelled, "cancelled"
        else:
            version.status = VersionStatus.failed
            version.message = (
                job.message
                if job.status is JobStatus.failed
                else "the fit ended without storing a model"
            )
    session.flush()


def _cancel_job(session: Session, job_id: int) -> None:
    try:
        queue.request_cancel(session=session, job_id=job_id)
    except (Conflict, NotFound):  # finished in the meantime: nothing to stop
        pass


def job_of(session: Session, version: ModelVersion) -> Job | None:
    return session.get(Job, version.job_id) if version.job_id is not None else None


# -- stored artifacts, and CompRF models that follow their build -----------------------


def load_fitted(session: Session, version_id: int) -> Fitted:
    blob = session.scalar(select(ModelVersion.artifact).where(ModelVersion.id == version_id))
    if blob is None:
        raise NotFound(f"model version {version_id} has no stored artifact")
    return Fitted.loads(blob)


def _follow_build(session: Session, model: LearnedModel, build: Build) -> None:
    version = _new_version(session, model, "build")
    version.params = {"build_id": build.id, **build.params}
    mirror_build(version, build)


def mirror_build(version: ModelVersion, build: Build) -> None:
    version.answers_cutoff = build.answers_cursor
    version.answers_count = build.queries_answered
    if build.status is BuildStatus.complete:
        version.status = VersionStatus.ready
        version.metrics = {
            "trees": int(build.params.get("n_trees", 0)),
            "queries_answered": build.queries_answered,
        }
        version.message = "the build is complete: the forest predicts by routing"
        version.fitted_at = utcnow()
    elif build.status is BuildStatus.cancelled:
        version.status = VersionStatus.failed
        version.message = f"build {build.id} was cancelled"
    else:
        version.status = VersionStatus.training
        version.message = f"build {build.id} is {build.status.value}"


def version_progress(session: Session, version: ModelVersion) -> tuple[float, str]:
    """How far a fit has come (0..1) and what it is doing."""
    if version.status is VersionStatus.ready:
        return 1.0, version.message
    if version.trigger == "build":
        model = session.get_one(LearnedModel, version.model_id)
        build = build_of(session, model)
        if build is None:
            return 0.0, version.message
        shares = build.progress.get("tree_done_share") or []
        done = float(np.mean(shares)) if shares else 0.0
        return done, version.message
    job = job_of(session, version)
    if job is None or version.status not in UNFINISHED:
        return 0.0, version.message
    return float(job.progress), job.message or version.message
