"""TripletBoost: a classifier boosted on the raters' answers, refitted as they grow
(boosting on from the last version where it can), labelling new items by their answers."""

from __future__ import annotations

from typing import Any

import numpy as np

from app import learn
from app.models import ModelKind
from app.training import fitting
from app.training.fitted import Fitted, ItemPredictions
from app.training.fitting import CannotFit, FitOutcome, Progress, Snapshot
from app.training.kinds.base import LearnerKind
from app.training.schemas import TripletBoostParams


def fit_tripletboost(
    snapshot: Snapshot, params: dict[str, Any], previous: Fitted | None, progress: Progress
) -> FitOutcome:
    train, labels = fitting.classes_needed(snapshot, "TripletBoost")
    answers = snapshot.answers
    if len(answers) < (TripletBoostKind.answers_needed or 1):
        raise CannotFit("TripletBoost needs answers; the project has none yet")
    seed = params.get("random_state", 0)
    # Parameters stored before runs voted had one long run: they keep meaning that.
    shape = {"n_iter": params.get("n_iter", 100_000), "n_runs": params.get("n_runs", 1)}
    everyone = np.arange(len(snapshot.item_ids))
    metrics: dict[str, Any] = {}
    splitter = fitting.stratified_folds(labels, params.get("cv_folds", 3), seed)
    steps = (splitter.get_n_splits() if splitter else 0) + 1
    if splitter is not None:
        predicted = np.empty(len(train), dtype=object)
        for fold, (fit_rows, held_rows) in enumerate(splitter.split(train, labels)):
            progress(fold / steps, f"cross-validation fold {fold + 1} of {steps - 1}")
            model = learn.TripletBoost(**shape, random_state=seed)
            try:
                model.fit(answers, train[fit_rows], labels[fit_rows])
            except ValueError:  # no answer among this fold's training items
                predicted[held_rows] = None
                continue
            predicted[held_rows] = model.predict(answers, train[held_rows])
        metrics["cv"] = {**fitting.accuracy_of(predicted, labels), "folds": splitter.get_n_splits()}
    progress((steps - 1) / steps, "fitting on every labelled item")
    boosting_on = _can_boost_on(previous, snapshot, train, labels, shape["n_runs"])
    warm = previous if params.get("warm_start", True) and boosting_on else None
    try:
        if warm is not None:
            model = warm.estimator
            new = answers[snapshot.answer_ids > warm.cutoff]
            model.partial_fit(new, n_iter=shape["n_iter"])
        else:
            model = learn.TripletBoost(**shape, random_state=seed).fit(answers, train, labels)
    except ValueError as exc:
        raise CannotFit(f"TripletBoost: {exc}") from exc
    predictions = boost_predictions(model, answers, everyone)
    metrics.update(fitting.test_split_metrics(snapshot, predictions))
    metrics["classifiers"] = int(model.n_classifiers_)
    metrics["boosting_rounds"] = int(model.n_iter_) * model.n_runs
    metrics["boosted_runs"] = model.n_runs
    fitted = Fitted(
        kind=ModelKind.tripletboost.value,
        item_ids=snapshot.item_ids,
        keys=snapshot.keys,
        predictions=predictions,
        estimator=model,
        train_positions=train,
        train_labels=labels,
    )
    outcome = FitOutcome(fitted, metrics, answers_used=len(answers))
    if warm is not None:
        outcome.notes.append(
            f"warm start: boosted on from the {warm.n_answers} answers fitted before"
        )
    return outcome


def boost_predictions(model: learn.TripletBoost, triplets: np.ndarray, items) -> ItemPredictions:
    """TripletBoost's label, class shares and support per item (None without support)."""
    proba = model.predict_proba(triplets, items)
    support = model.support(triplets, items)
    # The library's own rule decides the label (ties and silence are none), so the
    # service serves exactly what TripletBoost.predict gives offline.
    labels = np.asarray(model.predict(triplets, items), dtype=object)
    return ItemPredictions(model.classes_, labels, proba, support)


def _can_boost_on(
    previous: Fitted | None,
    snapshot: Snapshot,
    train: np.ndarray,
    labels: np.ndarray,
    n_runs: int,
) -> bool:
    """Boosting can go on from the last version when it knew the same labelled items,
    every answer it saw is still in use (no rater excluded since) and it has as many runs
    (one fitted before runs voted has none of its own)."""
    return (
        previous is not None
        and previous.kind == ModelKind.tripletboost
        and getattr(previous.estimator, "n_runs", None) == n_runs
        and np.array_equal(previous.item_ids[previous.train_positions], snapshot.item_ids[train])
        and previous.train_labels is not None
        and np.array_equal(previous.train_labels, labels)
        and int((snapshot.answer_ids <= previous.cutoff).sum()) == previous.n_answers
    )


class TripletBoostKind(LearnerKind):
    kind = ModelKind.tripletboost
    label = "TripletBoost"
    title = "TripletBoost classifier"
    params = TripletBoostParams
    answers_needed = 1
    active_gain_measure = "test_label_error"
    passive = True
    informs_samplers = "class_shares"
    places_new_items_by = "answers"

    def fit(self, snapshot, params, previous, progress) -> FitOutcome:
        return fit_tripletboost(snapshot, params, previous, progress)

    def predict_new(self, fitted, given, count):
        n = len(fitted.item_ids)
        return boost_predictions(fitted.estimator, given, n + np.arange(count)), None


TRIPLETBOOST = TripletBoostKind()
