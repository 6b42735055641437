"""A fit's life in the worker, and the refits that growing answers call for.

These run in the worker's jobs, not in a request: each step commits its own transaction
(a fit holds none open while it computes, which may take minutes), so a crash or a
cancel leaves the version in a state the next worker reads. The models and versions
themselves, and what requests do with them, are app/training/service.py.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from app.core.db import FastStatement
from app.core.errors import Conflict, ServiceError
from app.items.service import decode_features
from app.models import (
    Build,
    Item,
    LabelType,
    LearnedModel,
    ModelVersion,
    Project,
    Split,
    VersionStatus,
)
from app.models._types import utcnow
from app.scheduling.thresholds import excluded_rater_ids
from app.training import kinds
from app.training.fitted import Fitted
from app.training.fitting import CannotFit, Snapshot, measure_on_test_split
from app.training.service import (
    UNFINISHED,
    answers_since,
    cancel_training,
    latest_version,
    load_fitted,
    mirror_build,
    move_on,
    newest_ready,
    request_training,
    too_few_answers,
)
from app.triplets.log import (
    adaptive_ids,
    answer_columns,
    committed_bound,
    item_positions,
    judgement_groups,
    readable_bound,
)

_ITEMS = FastStatement(
    select(Item.id, Item.key, Item.label, Item.split, Item.features)
    .where(Item.project_id == bindparam("project_id"))
    .order_by(Item.id)
)


def snapshot(
    session: Session,
    project: Project,
    model: LearnedModel,
    *,
    cutoff: int | None = None,
    every_arm: bool = False,
) -> Snapshot:
    """The project as a fit of `model` reads it: its answers up to `cutoff` (default: all
    that can no longer change), of the model's arm unless `every_arm`."""
    # The driver's own rows, the split as the text it is stored as: at 50,000 items the
    # ORM's objects took half of a small fit's wait before it started, and SQLAlchemy's
    # row objects two thirds of what was left (0.15 -> 0.05 s on PostgreSQL).
    rows = _ITEMS.run_all(session, {"project_id": project.id})
    if not rows:
        raise ServiceError(f"project {project.id} has no items")
    id_list, keys, label_list, split_list, feature_list = zip(*rows, strict=True)
    item_ids = np.array(id_list, np.int64)
    labels = np.array(label_list, dtype=object)
    has_label = np.array([label is not None for label in label_list], dtype=bool)
    splits = np.array(split_list)
    features = None
    if project.feature_dim:
        features = np.full((len(rows), project.feature_dim), np.nan)
        for position, encoded in enumerate(feature_list):
            if encoded is not None:
                features[position] = decode_features(bytes(encoded))
    if cutoff is None:
        cutoff = _cutoff(session, project.id)
    arm = None if every_arm else model.arm
    answer_ids, answers, test_answers = _answers(session, project.id, cutoff, item_ids, arm)
    snap = Snapshot(
        item_ids=item_ids,
        keys=list(keys),
        labels=labels,
        is_train=has_label & (splits != Split.test.value),
        is_test=splits == Split.test.value,
        features=features,
        answers=answers,
        answer_ids=answer_ids,
        test_answers=test_answers,
        adaptive=np.isin(answer_ids, adaptive_ids(session, project.id, cutoff)),
        groups=judgement_groups(session, project.id, cutoff, answer_ids),
        cutoff=cutoff,
        regression=project.label_type is LabelType.regression,
    )
    kinds.of(model.kind).add_inputs(
        session, model, snap, lambda model_id: _ready_fit(session, model_id)
    )
    return snap


@contextmanager
def _collector_paused() -> Iterator[None]:
    """A read of a project's rows makes a Python object or more per item and answer, each
    freed by its count of references: the cyclic collector's passes over the worker's
    whole heap (its libraries' objects) cost as much as the read itself (at 50,000 items
    and 100,000 answers a snapshot took 0.14 s without them, 0.25 s with)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


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
    session: Session,
    project_id: int,
    cutoff: int,
    item_ids: np.ndarray,
    arm: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The answers a fit uses, as (ids, positions of anchor, closer, farther), and the
    researcher's test split as positions: excluded raters' answers and answers about
    items deleted since are left out (and, for a model of one arm, the other arms')."""
    excluded = excluded_rater_ids(session, project_id)
    found = []
    for test_split in (False, True):
        columns = answer_columns(
            session,
            project_id,
            cutoff,
            test_split=test_split,
            excluded_raters=excluded,
            arm=arm,
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


def _ready_fit(session: Session, model_id: int) -> Fitted | None:
    """The newest ready fit of a model, for a kind that learns from another (SMERF)."""
    other = session.get(LearnedModel, model_id)
    ready = newest_ready(session, other.id) if other else None
    return load_fitted(session, ready.id) if ready else None


class FitProblem(Exception):
    """The fit cannot succeed on this data; the version records why."""


class FitCancelled(Exception):
    """The version was cancelled (or deleted) while its fit waited or ran."""


def fit_version(
    session: Session,
    version_id: int,
    progress: Callable[[float, str], None],
    on_ready: Callable[[Session, ModelVersion], None] | None = None,
) -> ModelVersion:
    """Fit one version (the job's body). Safe to run again after a crash: it starts over.
    `on_ready(session, version)` runs in the transaction that makes the version ready
    (its job's success is recorded there, say)."""
    if session.get(ModelVersion, version_id) is None:
        raise FitProblem(f"model version {version_id} was deleted")
    if not _move_on(session, version_id, VersionStatus.training, "reading the answers"):
        raise FitCancelled()
    version = session.get_one(ModelVersion, version_id)
    model = session.get_one(LearnedModel, version.model_id)
    project = session.get_one(Project, model.project_id)
    progress(0.0, "reading the answers")

    began = time.perf_counter()
    try:
        with _collector_paused():
            snap = snapshot(session, project, model)
    except ServiceError as exc:
        _fail(session, version_id, str(exc.detail))
        raise FitProblem(str(exc.detail)) from exc
    version.answers_cutoff = snap.cutoff
    version.n_items = len(snap.item_ids)
    session.commit()  # hold no transaction open while fitting
    previous_version = newest_ready(session, model.id)
    previous, warm_source = None, None
    if previous_version is not None and previous_version.number < version.number:
        previous = load_fitted(session, previous_version.id)
        warm_source = previous_version.id
    params = dict(version.params)
    learner = kinds.of(model.kind)
    session.rollback()  # no transaction (nor snapshot) stays open through the fit
    seconds = {"reading": time.perf_counter() - began}
    began = time.perf_counter()
    try:
        outcome = learner.fit(
            snap,
            params,
            previous,
            lambda fraction, message: progress(0.05 + 0.9 * fraction, message),
        )
    except (CannotFit, ValueError) as exc:  # the library refused this data or these params
        _fail(session, version_id, str(exc))
        raise FitProblem(str(exc)) from exc
    if learner.serves_distances:
        seed = params.get("random_state", 0)
        measure_on_test_split(snap, outcome.fitted, outcome.metrics, seed)
    seconds["fitting"] = time.perf_counter() - began
    began = time.perf_counter()
    progress(0.96, "storing the model")
    fitted = outcome.fitted
    fitted.n_answers = len(snap.answers)
    fitted.cutoff = snap.cutoff
    blob = fitted.dumps()
    seconds["storing"] = time.perf_counter() - began  # the commit below aside
    outcome.metrics["seconds"] = {stage: round(value, 3) for stage, value in seconds.items()}
    stored = _move_on(
        session,
        version_id,
        VersionStatus.ready,
        "; ".join(outcome.notes) or "fitted",
        artifact=blob,
        artifact_bytes=len(blob),
        answers_count=outcome.answers_used,
        heldout_count=outcome.heldout,
        metrics=_json_ready(outcome.metrics),
        warm_start_from=warm_source if outcome.notes else None,
        fitted_at=utcnow(),
        before_commit=(
            None
            if on_ready is None
            else lambda: on_ready(session, session.get_one(ModelVersion, version_id))
        ),
    )
    if not stored:  # cancelled while it computed: it never serves
        raise FitCancelled()
    return session.get_one(ModelVersion, version_id)


def _move_on(
    session: Session,
    version_id: int,
    status: VersionStatus,
    message: str,
    before_commit: Callable[[], None] | None = None,
    **values: Any,
) -> bool:
    """`move_on` in a transaction of its own (nothing else the session holds is kept);
    `before_commit` joins that transaction if the version moved."""
    session.rollback()
    moved = move_on(session, version_id, status, message, **values)
    if moved and before_commit is not None:
        before_commit()
    session.commit()
    return moved


def _fail(session: Session, version_id: int, message: str) -> None:
    _move_on(session, version_id, VersionStatus.failed, message)


def mark_attempt_failed(session: Session, version_id: int, message: str, final: bool) -> None:
    """A fit that crashed: failed for good after its last attempt, else queued again."""
    if final:
        _move_on(session, version_id, VersionStatus.failed, message)
    else:
        _move_on(session, version_id, VersionStatus.queued, f"{message}; retrying")


def mark_cancelled(session: Session, version_id: int) -> None:
    _move_on(session, version_id, VersionStatus.cancelled, "cancelled")


def mark_interrupted(session: Session, version_id: int) -> None:
    """The worker stopped mid-fit (a server stop): queued again, to start over."""
    _move_on(
        session,
        version_id,
        VersionStatus.queued,
        "interrupted by a stop; starts over when a worker runs",
    )


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


def refit_due(session: Session) -> list[ModelVersion]:
    """Queue a fit of every passive model whose answers grew by its share since its last
    fit (or reached its minimum, before the first)."""
    queued = []
    models = session.scalars(
        select(LearnedModel).where(
            LearnedModel.auto_refit.is_(True), LearnedModel.kind.in_(kinds.passive())
        )
    ).all()
    for model in models:
        last = latest_version(session, model.id)
        if last is not None and last.status in UNFINISHED:
            continue
        if last is None:
            due = answers_since(session, model.project_id, 0, model.arm) >= model.min_answers
            due = due and too_few_answers(session, model) is None
        else:  # growth since the last fit, whether it succeeded, failed or was cancelled
            base = last.answers_count + last.heldout_count
            new = answers_since(session, model.project_id, last.answers_cutoff, model.arm)
            due = new > 0 and new >= model.refit_growth * max(base, model.min_answers)
        if due:
            queued.append(request_training(session=session, model=model, trigger="answers grew"))
            session.commit()
    return queued


def refit_without_erased(session: Session, project_id: int) -> list[ModelVersion]:
    """Fit anew every passive model of the project that was ever fitted, after answers
    were erased: its versions learned from them. A fit under way read them when it
    started, so it is cancelled and queued again; a queued one reads what is left. A
    model that now has too few answers keeps its versions until more come."""
    queued = []
    models = session.scalars(
        select(LearnedModel).where(
            LearnedModel.project_id == project_id, LearnedModel.kind.in_(kinds.passive())
        )
    ).all()
    for model in models:
        last = latest_version(session, model.id)
        if last is None:
            continue
        if last.status is VersionStatus.training:
            with suppress(Conflict):  # (it ended meanwhile: the new fit follows it)
                cancel_training(session=session, model=model)
        try:
            queued.append(
                request_training(session=session, model=model, trigger="a participant erased")
            )
        except Conflict:  # too few answers left to fit
            continue
    return queued


def follow_builds(session: Session) -> None:
    """Mark CompRF versions ready (or failed) as their builds finish."""
    rows = session.execute(
        select(ModelVersion, Build)
        .join(LearnedModel, LearnedModel.id == ModelVersion.model_id)
        .join(Build, Build.id == LearnedModel.build_id)
        .where(
            LearnedModel.kind.in_(kinds.from_builds()),
            ModelVersion.status.in_(UNFINISHED),
        )
    ).all()
    for version, build in rows:
        mirror_build(version, build)
    session.commit()
