"""Models on a project: set them up, fit versions in the worker, refit as answers grow.

A fit reads a snapshot of the project (items in id order, answers up to a committed
cut-off, excluded raters left out), calls the fitter of its kind, and stores the artifact
and metrics on its `ModelVersion`. The newest ready version serves. Passive models
refit by themselves (`refit_due`) once the answers grew by the model's `refit_growth`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from app.builds import routing
from app.core.errors import Conflict, NotFound, ServiceError
from app.items.service import decode_features
from app.learn import dissimilarity_from_embedding
from app.models import (
    Build,
    BuildStatus,
    Item,
    Job,
    LabelType,
    LearnedModel,
    ModelKind,
    ModelVersion,
    Prediction,
    PredictionStatus,
    Project,
    Split,
    Triplet,
    VersionStatus,
)
from app.models._types import utcnow
from app.scheduling.service import excluded_rater_ids
from app.training.fitted import Fitted
from app.training.fitting import FITTERS, CannotFit, Snapshot, measure_on_test_split
from app.training.schemas import ModelCreate, checked_params
from app.triplets.log import (
    adaptive_ids,
    answer_columns,
    committed_bound,
    item_positions,
    readable_bound,
)
from app.worker import queue

TRAIN_JOB = "train_model"
PASSIVE = (ModelKind.tripletboost, ModelKind.tete)
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
) -> LearnedModel:
    taken = session.scalar(
        select(LearnedModel.id).where(
            LearnedModel.project_id == project.id, LearnedModel.name == name
        )
    )
    if taken is not None:
        raise Conflict(f"project {project.id} already has a model named '{name}' (id {taken})")
    build = None
    if kind is ModelKind.comprf:
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
        auto_refit=auto_refit and kind in PASSIVE,
        refit_growth=refit_growth,
        min_answers=min_answers,
        build_id=build_id,
        inputs=inputs,
    )
    session.add(model)
    session.flush()
    if build is not None:
        _follow_build(session, model, build)
    elif train_now:
        request_training(session=session, model=model, trigger="created")
    return model


def _matrix_blob(body: ModelCreate, params: dict) -> bytes | None:
    """SMERF's uploaded dissimilarity matrix, checked and packed (None: none)."""
    wants = body.kind is ModelKind.smerf and params.get("dissimilarity") == "matrix"
    if body.matrix is None:
        if wants:
            raise ServiceError("matrix: SMERF with dissimilarity 'matrix' needs the matrix")
        return None
    if not wants:
        raise ServiceError("matrix: only a SMERF model with dissimilarity 'matrix' takes one")
    keys = body.matrix.keys
    if len(set(keys)) != len(keys):
        raise ServiceError("matrix.keys: an item key repeats")
    rows = body.matrix.values
    bad = next((i for i, row in enumerate(rows) if len(row) != len(keys)), None)
    if len(rows) != len(keys) or bad is not None:
        where = f"row {bad}" if bad is not None else f"{len(rows)} rows"
        raise ServiceError(f"matrix.values: must be {len(keys)} x {len(keys)}; {where} is not")
    matrix = np.array(rows, dtype=np.float64)
    if not np.all(np.isfinite(matrix)) or np.any(matrix < 0):
        raise ServiceError("matrix.values: dissimilarities must be finite and non-negative")
    if not np.allclose(matrix, matrix.T) or np.any(np.diag(matrix) != 0):
        raise ServiceError("matrix.values: must be symmetric with a zero diagonal")
    return pack_matrix(keys, matrix)


def set_up_model(*, session: Session, project: Project, body: ModelCreate) -> LearnedModel:
    """A model as a request describes it (the API's or the workspace form's), checked
    against the project: its parameters, the build or embedding it names, features."""
    params = checked_params(body.kind, body.params)
    if body.kind is ModelKind.comprf and body.build_id is None:
        raise ServiceError("build_id: a CompRF model comes from a build; name it")
    if body.kind is ModelKind.smerf and params["dissimilarity"] == "embedding":
        source = params.get("embedding_model_id")
        source_model = session.get(LearnedModel, source) if source is not None else None
        if (
            source_model is None
            or source_model.project_id != project.id
            or source_model.kind is not ModelKind.tete
        ):
            raise ServiceError(
                f"params.embedding_model_id: name a t-ETE model of this project (got {source!r})"
            )
    if body.kind in (ModelKind.smerf, ModelKind.disdf) and not project.feature_dim:
        raise ServiceError(
            f"kind: {body.kind.value} learns from item features, and the items of "
            f"project {project.id} have none"
        )
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
        inputs=_matrix_blob(body, params),
        train_now=body.train,
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


def update_policy(*, session: Session, model: LearnedModel, changes: dict[str, Any]) -> None:
    if changes.get("auto_refit") and model.kind not in PASSIVE:
        raise ServiceError(
            f"auto_refit: only the passive learners ({', '.join(PASSIVE)}) refit as answers "
            f"grow; a {model.kind.value} model is trained on request"
        )
    for name, value in changes.items():
        setattr(model, name, value)
    session.flush()


def delete_model(*, session: Session, model: LearnedModel) -> None:
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


def route_wanted_items(*, session: Session, project: Project, model: LearnedModel) -> Prediction:
    """A CompRF model labels the project's test and unlabelled items by routing them down
    its forest, its questions asked of raters first; a routing already under way is
    returned instead of starting a second."""
    if model.kind is not ModelKind.comprf:
        raise Conflict(f"model {model.id} is not a CompRF forest: it labels items without routing")
    build = build_of(session, model)
    if build is None:
        raise NotFound(f"model {model.id}'s build no longer exists")
    under_way = routing.newest_prediction(session, build.id)
    if under_way is not None and under_way.status is PredictionStatus.routing:
        return under_way
    return routing.start_prediction(session=session, project=project, build=build, keys=None)


def request_training(*, session: Session, model: LearnedModel, trigger: str) -> ModelVersion:
    """Queue a fit of `model` on the answers held when it starts; a fit already queued
    or running is returned instead of starting a second."""
    if model.kind is ModelKind.comprf:
        raise Conflict(
            f"model {model.id} is a CompRF forest: it grows with its build "
            f"({model.build_id}), not by training"
        )
    if session.get_bind().dialect.name == "postgresql":
        # Serialise with the periodic refit check and other requests on this model.
        session.execute(
            select(LearnedModel.id).where(LearnedModel.id == model.id).with_for_update()
        )
    running = unfinished_versions(session, model.id)
    if running:
        return running[0]
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
    running = unfinished_versions(session, model.id)
    if not running:
        raise Conflict(f"model {model.id} has no fit queued or running")
    version = running[0]
    if version.job_id is not None:
        _cancel_job(session, version.job_id)
    if version.status is VersionStatus.queued:
        version.status = VersionStatus.cancelled
        version.message = "cancelled before it started"
        # Automatic refits measure growth from here: a cancel is not undone 5 s later.
        version.answers_cutoff = readable_bound(session, model.project_id)
    session.flush()
    return version


def _cancel_job(session: Session, job_id: int) -> None:
    try:
        queue.request_cancel(session=session, job_id=job_id)
    except (Conflict, NotFound):  # finished in the meantime: nothing to stop
        pass


def job_of(session: Session, version: ModelVersion) -> Job | None:
    return session.get(Job, version.job_id) if version.job_id is not None else None


# -- the fit, in the worker ----------------------------------------------------------------


def snapshot(session: Session, project: Project, model: LearnedModel) -> Snapshot:
    rows = session.execute(
        select(Item.id, Item.key, Item.label, Item.split, Item.features)
        .where(Item.project_id == project.id)
        .order_by(Item.id)
    ).all()
    if not rows:
        raise ServiceError(f"project {project.id} has no items")
    item_ids = np.fromiter((row.id for row in rows), np.int64, len(rows))
    labels = np.array([row.label for row in rows], dtype=object)
    has_label = np.array([row.label is not None for row in rows])
    splits = np.array([row.split.value for row in rows])
    features = None
    if project.feature_dim:
        features = np.full((len(rows), project.feature_dim), np.nan)
        for position, row in enumerate(rows):
            if row.features is not None:
                features[position] = decode_features(row.features)
    cutoff = _cutoff(session, project.id)
    answer_ids, answers, test_answers = _answers(session, project.id, cutoff, item_ids)
    snap = Snapshot(
        item_ids=item_ids,
        keys=[row.key for row in rows],
        labels=labels,
        is_train=has_label & (splits != Split.test.value),
        is_test=splits == Split.test.value,
        features=features,
        answers=answers,
        answer_ids=answer_ids,
        test_answers=test_answers,
        adaptive=np.isin(answer_ids, adaptive_ids(session, project.id, cutoff)),
        cutoff=cutoff,
        regression=project.label_type is LabelType.regression,
    )
    _add_dissimilarity(session, model, snap)
    return snap


def _cutoff(session: Session, project_id: int) -> int:
    """The last answer id below which no answer can still appear."""
    for _ in range(50):
        bound = committed_bound(session, project_id)
        if bound is not None:
            return bound
        time.sleep(0.1)
    # Writers kept the log busy for seconds: an answer still in flight below the newest
    # id joins the next version instead.
    return readable_bound(session, project_id)


def _answers(
    session: Session, project_id: int, cutoff: int, item_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The answers a fit uses, as (ids, positions of anchor, closer, farther), and the
    researcher's test split as positions: excluded raters' answers and answers about
    items deleted since are left out."""
    excluded = excluded_rater_ids(session, project_id)
    found = []
    for test_split in (False, True):
        columns = answer_columns(
            session, project_id, cutoff, test_split=test_split, excluded_raters=excluded
        )
        block = np.stack(
            [columns["anchor_id"], columns["closer_id"], columns["farther_id"]], axis=1
        )
        positions, known = item_positions(item_ids, block)
        if known.all():  # as nearly always: no copy of millions of rows
            found.append((columns["id"], positions))
        else:
            found.append((columns["id"][known], positions[known]))
    (ids, answers), (_, test) = found
    return ids, answers, test


def _add_dissimilarity(session: Session, model: LearnedModel, snap: Snapshot) -> None:
    """SMERF's D where it does not come from labels: a t-ETE model's current embedding,
    or the matrix the researcher uploaded (over item keys)."""
    if model.kind is not ModelKind.smerf:
        return
    source = model.params.get("dissimilarity", "labels")
    if source == "embedding":
        embedding_model = session.get(LearnedModel, model.params["embedding_model_id"])
        ready = newest_ready(session, embedding_model.id) if embedding_model else None
        if ready is None:
            raise ServiceError(
                f"SMERF's D comes from model {model.params['embedding_model_id']}'s "
                "embedding, which has no ready version yet"
            )
        fitted = load_fitted(session, ready.id)
        # Only items with answers have a place in the embedding; the answers that placed
        # them cannot measure SMERF: it is measured on the rest (held out, or newer).
        answered = fitted.candidates()
        positions = np.searchsorted(snap.item_ids, fitted.item_ids[answered])
        positions = np.minimum(positions, len(snap.item_ids) - 1)
        kept = snap.item_ids[positions] == fitted.item_ids[answered]
        snap.dissimilarity_items = positions[kept]
        snap.dissimilarity = dissimilarity_from_embedding(fitted.coordinates[answered[kept]])
        unseen = snap.answer_ids > fitted.cutoff
        if fitted.heldout_answer_ids is not None:
            unseen |= np.isin(snap.answer_ids, fitted.heldout_answer_ids)
        snap.measure_on = np.flatnonzero(unseen)
    elif source == "matrix":
        keys, matrix = unpack_matrix(model.inputs)
        position_of = {key: i for i, key in enumerate(snap.keys)}
        missing = [key for key in keys if key not in position_of]
        if missing:
            raise ServiceError(f"D names items no longer in the project: {missing[:10]}")
        snap.dissimilarity_items = np.array([position_of[key] for key in keys], np.int64)
        snap.dissimilarity = matrix


def pack_matrix(keys: list[str], matrix: np.ndarray) -> bytes:
    header = "\n".join(keys).encode()
    return len(header).to_bytes(8, "little") + header + matrix.astype("<f8").tobytes()


def unpack_matrix(blob: bytes) -> tuple[list[str], np.ndarray]:
    size = int.from_bytes(blob[:8], "little")
    keys = blob[8 : 8 + size].decode().split("\n")
    matrix = np.frombuffer(blob[8 + size :], dtype="<f8").reshape(len(keys), len(keys))
    return keys, matrix


def load_fitted(session: Session, version_id: int) -> Fitted:
    blob = session.scalar(select(ModelVersion.artifact).where(ModelVersion.id == version_id))
    if blob is None:
        raise NotFound(f"model version {version_id} has no stored artifact")
    return Fitted.loads(blob)


class FitProblem(Exception):
    """The fit cannot succeed on this data; the version records why."""


def fit_version(
    session: Session, version_id: int, progress: Callable[[float, str], None]
) -> ModelVersion:
    """Fit one version (the job's body). Safe to run again after a crash: it starts over."""
    version = session.get(ModelVersion, version_id)
    if version is None:
        raise FitProblem(f"model version {version_id} was deleted")
    model = session.get(LearnedModel, version.model_id)
    project = session.get(Project, model.project_id)
    version.status = VersionStatus.training
    version.message = "reading the answers"
    session.commit()
    progress(0.0, "reading the answers")

    began = time.perf_counter()
    try:
        snap = snapshot(session, project, model)
    except ServiceError as exc:
        _fail(session, version_id, str(exc.detail))
        raise FitProblem(str(exc.detail)) from exc
    version.answers_cutoff = snap.cutoff
    version.n_items = len(snap.item_ids)
    session.commit()  # hold no transaction open while fitting
    previous_version = newest_ready(session, model.id)
    previous = None
    if previous_version is not None and previous_version.number < version.number:
        previous = load_fitted(session, previous_version.id)
    warm_source = previous_version.id if previous is not None else None
    params = dict(version.params)
    session.rollback()  # no transaction (nor snapshot) stays open through the fit
    seconds = {"reading": time.perf_counter() - began}
    began = time.perf_counter()
    try:
        outcome = FITTERS[model.kind.value](
            snap,
            params,
            previous,
            lambda fraction, message: progress(0.05 + 0.9 * fraction, message),
        )
    except (CannotFit, ValueError) as exc:  # the library refused this data or these params
        _fail(session, version_id, str(exc))
        raise FitProblem(str(exc)) from exc
    measure_on_test_split(snap, outcome.fitted, outcome.metrics, params.get("random_state", 0))
    seconds["fitting"] = time.perf_counter() - began
    began = time.perf_counter()
    progress(0.96, "storing the model")
    fitted = outcome.fitted
    fitted.n_answers = len(snap.answers)
    fitted.cutoff = snap.cutoff
    blob = fitted.dumps()
    seconds["storing"] = time.perf_counter() - began  # the commit below aside
    outcome.metrics["seconds"] = {stage: round(value, 3) for stage, value in seconds.items()}
    version = session.get(ModelVersion, version_id)
    version.status = VersionStatus.ready
    version.artifact = blob
    version.artifact_bytes = len(blob)
    version.answers_count = outcome.answers_used
    version.heldout_count = outcome.heldout
    version.metrics = _json_ready(outcome.metrics)
    version.warm_start_from = warm_source if outcome.notes else None
    version.message = "; ".join(outcome.notes) or "fitted"
    version.fitted_at = utcnow()
    session.commit()
    return version


def _fail(session: Session, version_id: int, message: str) -> None:
    session.rollback()
    session.execute(
        update(ModelVersion)
        .where(ModelVersion.id == version_id)
        .values(status=VersionStatus.failed, message=message)
    )
    session.commit()


def mark_attempt_failed(session: Session, version_id: int, message: str, final: bool) -> None:
    """A fit that crashed: failed for good after its last attempt, else queued again."""
    session.rollback()
    status = VersionStatus.failed if final else VersionStatus.queued
    note = message if final else f"{message}; retrying"
    session.execute(
        update(ModelVersion)
        .where(ModelVersion.id == version_id)
        .values(status=status, message=note)
    )
    session.commit()


def mark_cancelled(session: Session, version_id: int) -> None:
    session.rollback()
    session.execute(
        update(ModelVersion)
        .where(ModelVersion.id == version_id, ModelVersion.status.in_(UNFINISHED))
        .values(status=VersionStatus.cancelled, message="cancelled")
    )
    session.commit()


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


# -- refits ------------------------------------------------------------------------------


def answers_since(session: Session, project_id: int, after: int) -> int:
    return (
        session.scalar(
            select(func.count()).where(
                Triplet.project_id == project_id,
                Triplet.id > after,
                Triplet.id <= readable_bound(session, project_id),
                Triplet.is_test.is_(False),
            )
        )
        or 0
    )


def refit_due(session: Session) -> list[ModelVersion]:
    """Queue a fit of every passive model whose answers grew by its share since its last
    fit (or reached its minimum, before the first)."""
    queued = []
    models = session.scalars(
        select(LearnedModel).where(
            LearnedModel.auto_refit.is_(True), LearnedModel.kind.in_(PASSIVE)
        )
    ).all()
    for model in models:
        last = latest_version(session, model.id)
        if last is not None and last.status in UNFINISHED:
            continue
        if last is None:
            due = answers_since(session, model.project_id, 0) >= model.min_answers
        else:  # growth since the last fit, whether it succeeded, failed or was cancelled
            base = last.answers_count + last.heldout_count
            new = answers_since(session, model.project_id, last.answers_cutoff)
            due = new > 0 and new >= model.refit_growth * max(base, model.min_answers)
        if due:
            queued.append(request_training(session=session, model=model, trigger="answers grew"))
            session.commit()
    return queued


# -- CompRF: a model that follows its build ------------------------------------------------


def _follow_build(session: Session, model: LearnedModel, build: Build) -> None:
    version = _new_version(session, model, "build")
    version.params = {"build_id": build.id, **build.params}
    _mirror_build(version, build)


def _mirror_build(version: ModelVersion, build: Build) -> None:
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


def follow_builds(session: Session) -> None:
    """Mark CompRF versions ready (or failed) as their builds finish."""
    rows = session.execute(
        select(ModelVersion, Build)
        .join(LearnedModel, LearnedModel.id == ModelVersion.model_id)
        .join(Build, Build.id == LearnedModel.build_id)
        .where(
            LearnedModel.kind == ModelKind.comprf,
            ModelVersion.status.in_(UNFINISHED),
        )
    ).all()
    for version, build in rows:
        _mirror_build(version, build)
    session.commit()


def version_progress(session: Session, version: ModelVersion) -> tuple[float, str]:
    """How far a fit has come (0..1) and what it is doing."""
    if version.status is VersionStatus.ready:
        return 1.0, version.message
    if version.trigger == "build":
        model = session.get(LearnedModel, version.model_id)
        build = build_of(session, model)
        if build is None:
            return 0.0, version.message
        shares = build.progress.get("tree_done_share") or []
        done = float(np.mean(shares)) if shares else 0.0
        return done, version.message
    job = job_of(session, version)
    if job is None:
        return 0.0, version.message
    return float(job.progress), job.message or version.message


# What a learning curve plots, in the order a researcher reads them: (metric path, name).
CURVE_METRICS = (
    (("heldout_triplet_error",), "held-out triplet error"),
    (("test", "accuracy"), "test accuracy"),
    (("cv", "accuracy"), "cross-validated accuracy"),
    (("leave_one_out", "accuracy"), "leave-one-out accuracy"),
)


def learning_curve(*, session: Session, model: LearnedModel) -> list[dict[str, Any]]:
    """One series per metric the model's ready versions report: (answers used, value),
    one point per version, oldest first."""
    ready = session.scalars(
        select(ModelVersion)
        .where(ModelVersion.model_id == model.id, ModelVersion.status == VersionStatus.ready)
        .order_by(ModelVersion.number)
    )
    series: dict[str, list[list[float]]] = {}
    for version in ready:
        for path, name in CURVE_METRICS:
            value: Any = version.metrics or {}
            for step in path:
                value = value.get(step) if isinstance(value, dict) else None
            if isinstance(value, int | float):
                series.setdefault(name, []).append([version.answers_count, float(value)])
    return [{"name": name, "points": points} for name, points in series.items()]


@dataclass(frozen=True)
class LabellingStanding:
    """How well one model labels items now (its newest ready version), on the
    researcher's test split and by cross-validation over the labelled items: accuracy
    among the items it labels, and the share it labels."""

    model: LearnedModel
    answers: int
    test: tuple[float, float] | None
    cv: tuple[float, float] | None

    def right(self, measure: str) -> float | None:
        """The share of all measured items labelled right (accuracy x coverage): a model
        that labels few items well does not beat one that labels all of them."""
        found = getattr(self, measure)
        return None if found is None else found[0] * found[1]


def _forest_on_test_split(session: Session, model: LearnedModel) -> LabellingStanding | None:
    """A CompRF forest labels an item by routing it, with questions to raters: it is
    measured by its newest complete routing of the test split, never cross-validated
    (its training items hold no answers to route them down trees that left them out)."""
    build = build_of(session, model)
    routed = routing.routing_of_test_split(session=session, build=build) if build else None
    if routed is None:
        return None
    return LabellingStanding(model, routed.answers, (routed.accuracy, routed.coverage), None)


def labelling_standings(
    *, session: Session, project: Project
) -> tuple[list[LabellingStanding], LabellingStanding | None, str | None]:
    """Every model whose newest ready version labels items, and the one that labels
    best now: on the test split where every such model was measured on it, else by
    cross-validation (None where fewer than two models can be compared)."""
    standings = []
    for model in list_models(session=session, project=project):
        version = newest_ready(session, model.id)
        if version is None:
            continue
        if model.kind is ModelKind.comprf:
            routed = _forest_on_test_split(session, model)
            if routed is not None:
                standings.append(routed)
            continue
        metrics = version.metrics or {}
        found = {}
        for measure in ("test", "cv", "leave_one_out"):
            entry = metrics.get(measure)
            if isinstance(entry, dict) and entry.get("accuracy") is not None:
                found[measure] = (float(entry["accuracy"]), float(entry.get("coverage") or 1.0))
        if found:
            standings.append(
                LabellingStanding(
                    model,
                    version.answers_count,
                    found.get("test"),
                    found.get("cv") or found.get("leave_one_out"),
                )
            )
    for measure in ("test", "cv"):
        if len(standings) >= 2 and all(s.right(measure) is not None for s in standings):
            return standings, max(standings, key=lambda s: s.right(measure)), measure
    return standings, None, None
