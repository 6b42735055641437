"""DisDF: a cascade of random forests over item features, learnt from the labelled
items; its representation is an embedding of the featured items, serving coordinates,
distances and neighbours, and labels for new items by their features."""

from __future__ import annotations

from typing import Any

import numpy as np

from app import learn
from app.models import ModelKind
from app.training import fitting
from app.training.fitted import Fitted, ItemPredictions
from app.training.fitting import CannotFit, FitOutcome, Progress, Snapshot
from app.training.kinds.base import LearnerKind
from app.training.schemas import DisDFParams


def fit_disdf(
    snapshot: Snapshot, params: dict[str, Any], previous: Fitted | None, progress: Progress
) -> FitOutcome:
    features, featured = fitting.featured_items(snapshot, "DisDF")
    train, labels = fitting.classes_needed(snapshot, "DisDF")
    train = np.intersect1d(train, featured)
    labels = snapshot.labels[train].astype(str)
    if len(np.unique(labels)) < 2:
        raise CannotFit("DisDF needs labelled training items with features in two classes")
    seed = params.get("random_state", 0)
    progress(0.05, f"building the cascade on {len(train)} items")
    model = learn.DisDF(
        n_estimators=params.get("n_estimators", 100),
        max_levels=params.get("max_levels", 5),
        n_folds=params.get("n_folds", 3),
        random_state=seed,
    ).fit(features[train], labels)
    progress(0.8, "placing every featured item")
    placed = model.transform(features[featured])
    representation = np.full((len(snapshot.item_ids), placed.shape[1]), np.nan)
    representation[featured] = placed
    proba = np.full((len(snapshot.item_ids), len(model.classes_)), np.nan)
    proba[featured] = model.predict_proba(features[featured])
    support = np.zeros(len(snapshot.item_ids), np.int64)
    support[featured] = model.n_levels_
    predictions = ItemPredictions.deciding(model.classes_, proba, support)
    fitted = Fitted(
        kind=ModelKind.disdf.value,
        item_ids=snapshot.item_ids,
        keys=snapshot.keys,
        predictions=predictions,
        estimator=model,
        coordinates=representation,
        features=snapshot.features,
        featured=featured,
        train_positions=train,
        train_labels=labels,
    )
    metrics: dict[str, Any] = {
        "cv": {
            "accuracy": float(model.level_accuracy_[-1]),
            "folds": int(model.n_folds),
            "items": len(train),
        },
        "levels": int(model.n_levels_),
    }
    metrics.update(fitting.test_split_metrics(snapshot, predictions))
    fitting.answer_agreement(snapshot, fitted, metrics, seed)
    return FitOutcome(fitted, metrics, answers_used=0, heldout=metrics.get("answers_checked", 0))


class DisDFKind(LearnerKind):
    kind = ModelKind.disdf
    label = "DisDF"
    title = "DisDF metric (item features)"
    params = DisDFParams
    learns_from_features = True
    serves_distances = True
    serves_embedding = True
    places_new_items_by = "features"

    def fit(self, snapshot, params, previous, progress) -> FitOutcome:
        return fit_disdf(snapshot, params, previous, progress)

    def predict_new(self, fitted, given, count):
        model = fitted.estimator
        proba = model.predict_proba(given)
        support = np.full(len(given), model.n_levels_, np.int64)
        return ItemPredictions.deciding(model.classes_, proba, support), None


DISDF_KIND = DisDFKind()
