"""Fitting each kind of model on a snapshot of a project, with its metrics.

No database here: the service reads a `Snapshot` (items in id order, answers as
positions) and stores what comes back. Every random choice is seeded from the model's
`random_state`, so the same answers give the same version, and an offline run of the
library on the same answers gives the same figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from app import learn
from app.training.fitted import Fitted, ItemPredictions, required_part

if TYPE_CHECKING:
    from app.learn import TripletBoost

Progress = Callable[[float, str], None]


class CannotFit(ValueError):
    """The project's data cannot support this model (too few labels, no features, …)."""


# The fewest answers a fit of each kind can learn from: fewer and it fails (t-ETE holds a
# share out to choose its scale). The service asks this before queueing a fit.
ANSWERS_NEEDED = {"tete": 10, "tripletboost": 1}


@dataclass
class Snapshot:
    """A project as a fit sees it. `labels` is None where an item has none; `is_train`
    marks labelled items outside the test split; answers are (anchor, closer, farther)
    positions, in the order they were given."""

    item_ids: np.ndarray
    keys: list[str]
    labels: np.ndarray  # object
    is_train: np.ndarray  # bool
    is_test: np.ndarray  # bool
    features: np.ndarray | None  # (n, f) with NaN rows for items without
    answers: np.ndarray
    answer_ids: np.ndarray  # the triplet id of each answer, ascending
    cutoff: int
    # The researcher's test split (positions), never fitted: every model is measured on it.
    test_answers: np.ndarray = field(default_factory=lambda: np.empty((0, 3), np.int64))
    # Per answer: to a question chosen adaptively (fitted, never held out to measure).
    adaptive: np.ndarray | None = None
    # Per answer: its judgement (one screen's triplets share one), None where no answer
    # came from a judgement: held-out splits keep a judgement's triplets together.
    groups: np.ndarray | None = None
    regression: bool = False
    dissimilarity: np.ndarray | None = None  # SMERF's D over `dissimilarity_items`
    dissimilarity_items: np.ndarray | None = None
    # The answers a learnt metric may be measured on (None: all): those its D did not
    # come from.
    measure_on: np.ndarray | None = None

    @property
    def train_positions(self) -> np.ndarray:
        return np.flatnonzero(self.is_train)


@dataclass
class FitOutcome:
    fitted: Fitted
    metrics: dict[str, Any]
    answers_used: int
    heldout: int = 0
    notes: list[str] = field(default_factory=list)


def _classes_needed(snapshot: Snapshot, kind: str) -> tuple[np.ndarray, np.ndarray]:
    train = snapshot.train_positions
    if snapshot.regression:
        raise CannotFit(f"{kind} classifies: the project's labels are numbers (regression)")
    labels = snapshot.labels[train].astype(str)
    if len(np.unique(labels)) < 2:
        raise CannotFit(
            f"{kind} needs labelled training items of at least two classes; "
            f"the project has {len(train)} labelled training item(s) "
            f"in {len(np.unique(labels))} class(es)"
        )
    return train, labels


def _accuracy(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float | int | None]:
    spoke = np.array([label is not None for label in predicted], dtype=bool)
    correct = np.array(
        [p == t for p, t in zip(predicted[spoke], truth[spoke], strict=True)], dtype=bool
    )
    return {
        "accuracy": float(correct.mean()) if len(correct) else None,
        "coverage": float(spoke.mean()) if len(spoke) else None,
        "items": len(truth),
    }


def _test_metrics(snapshot: Snapshot, predictions: ItemPredictions) -> dict[str, Any]:
    test = np.flatnonzero(snapshot.is_test & np.array([x is not None for x in snapshot.labels]))
    if not len(test):
        return {}
    return {"test": _accuracy(predictions.labels[test], snapshot.labels[test].astype(str))}


def _folds(labels: np.ndarray, wanted: int, seed: int):
    counts = np.unique(labels, return_counts=True)[1]
    folds = int(min(wanted, counts.min()))
    if folds < 2:
        return None
    from sklearn.model_selection import StratifiedKFold

    return StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)


# -- TripletBoost -------------------------------------------------------------------------


def fit_tripletboost(
    snapshot: Snapshot, params: dict[str, Any], previous: Fitted | None, progress: Progress
) -> FitOutcome:
    train, labels = _classes_needed(snapshot, "TripletBoost")
    answers = snapshot.answers
    if len(answers) < ANSWERS_NEEDED["tripletboost"]:
        raise CannotFit("TripletBoost needs answers; the project has none yet")
    seed = params.get("random_state", 0)
    # Parameters stored before runs voted had one long run: they keep meaning that.
    shape = {"n_iter": params.get("n_iter", 100_000), "n_runs": params.get("n_runs", 1)}
    everyone = np.arange(len(snapshot.item_ids))
    metrics: dict[str, Any] = {}
    splitter = _folds(labels, params.get("cv_folds", 3), seed)
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
        metrics["cv"] = {**_accuracy(predicted, labels), "folds": splitter.get_n_splits()}
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
    metrics.update(_test_metrics(snapshot, predictions))
    metrics["classifiers"] = int(model.n_classifiers_)
    metrics["boosting_rounds"] = int(model.n_iter_) * model.n_runs
    metrics["boosted_runs"] = model.n_runs
    fitted = Fitted(
        kind="tripletboost",
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


def boost_predictions(model: TripletBoost, triplets: np.ndarray, items) -> ItemPredictions:
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
        and previous.kind == "tripletboost"
        and getattr(previous.estimator, "n_runs", None) == n_runs
        and np.array_equal(previous.item_ids[previous.train_positions], snapshot.item_ids[train])
        and previous.train_labels is not None
        and np.array_equal(previous.train_labels, labels)
        and int((snapshot.answer_ids <= previous.cutoff).sum()) == previous.n_answers
    )


# -- t-ETE ---------------------------------------------------------------------------------


def heldout_split(
    n_answers: int,
    share: float,
    seed: int,
    unbiased: np.ndarray | None = None,
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded split of the answers: (fit rows, held-out rows), a `share` of the
    `unbiased` ones (default all) held out; with `groups`, whole groups (the triplets of
    one judgement), drawn until the share is reached, and only groups all unbiased."""
    every = np.arange(n_answers)
    if groups is None:
        order = np.random.default_rng(seed).permutation(n_answers)
        if unbiased is not None:
            order = order[unbiased[order]]
        n_heldout = round(share * len(order)) if len(order) >= 10 else 0
        held = np.sort(order[:n_heldout])
        return np.setdiff1d(every, held, assume_unique=True), held
    from app.learn.judgements import whole_groups  # scikit-learn: loaded where fits run

    of_row, sizes, whole = whole_groups(groups, unbiased)
    n_eligible = n_answers if unbiased is None else int(unbiased.sum())
    wanted = round(share * n_eligible) if n_eligible >= 10 else 0
    order = np.random.default_rng(seed).permutation(len(sizes))
    order = order[whole[order]]
    # The fewest groups, in that order, that hold `wanted` answers (none for none).
    held_so_far = np.concatenate([[0], np.cumsum(sizes[order])])
    taken = order[: int(np.searchsorted(held_so_far, wanted))]
    held = np.flatnonzero(np.isin(of_row, taken))
    return np.setdiff1d(every, held, assume_unique=True), held


def fit_tete(
    snapshot: Snapshot, params: dict[str, Any], previous: Fitted | None, progress: Progress
) -> FitOutcome:
    answers = snapshot.answers
    if len(answers) < ANSWERS_NEEDED["tete"]:
        raise CannotFit(
            f"t-ETE needs at least {ANSWERS_NEEDED['tete']} answers; the project has {len(answers)}"
        )
    seed = params.get("random_state", 0)
    n = len(snapshot.item_ids)
    model = learn.TETE(
        n_components=params.get("n_components", "auto"),
        t=params.get("t", "auto"),
        cv=params.get("cv", 3),
        max_iter=params.get("max_iter", 1000),
        tol=params.get("tol", 1e-5),
        n_iter_no_change=params.get("n_iter_no_change", 200),
        optimizer=params.get("optimizer", "gd"),
        random_state=seed,
    )
    chooses = "auto" in (model.t, model.n_components)
    share = params.get("heldout_share")
    share = (0.0 if chooses else 0.1) if share is None else share
    # Held-out errors are measured on answers to uniformly random questions only.
    unbiased = None if snapshot.adaptive is None else ~snapshot.adaptive
    fit_rows, held_rows = heldout_split(len(answers), share, seed, unbiased, snapshot.groups)
    init = None
    notes = []
    if previous is not None and previous.kind == "tete" and params.get("warm_start", True):
        coordinates = required_part(previous.coordinates)
        d = coordinates.shape[1]
        if model.n_components in ("auto", d):
            init = np.random.default_rng(seed).standard_normal((n, d))
            # Items known last time start where they were; new ones near the centre.
            init *= coordinates.std() * 0.1
            known = np.searchsorted(previous.item_ids, snapshot.item_ids)
            known = np.minimum(known, len(previous.item_ids) - 1)
            same = previous.item_ids[known] == snapshot.item_ids
            init[same] = coordinates[known[same]]
            notes.append("warm start from the previous version's embedding")

    def step(number: int, loss: float) -> None:
        planned = model.planned_steps_
        stage = "choosing the dimension and loss, then fitting" if chooses else "fitting"
        progress(min(number / planned, 1.0), f"{stage}: step {number} of at most {planned}")

    model.fit(
        answers[fit_rows],
        n_items=n,
        init=init,
        callback=step,
        unbiased=None if unbiased is None else unbiased[fit_rows],
        groups=None if snapshot.groups is None else snapshot.groups[fit_rows],
    )
    embedding = model.embedding_
    metrics: dict[str, Any] = {
        "training_triplet_error": learn.triplet_error(embedding, answers[fit_rows]),
        "steps": int(model.n_iter_),
        "converged": bool(model.converged_),
        "n_components": int(model.n_components_),
        "loss": model.loss_,
        "t": model.t_,
    }
    if model.cv_results_ is not None:
        results = model.cv_results_
        best = model.best_index_
        metrics["selection"] = {
            "candidates": [
                {
                    "loss": candidate["loss"],
                    "n_components": int(candidate["n_components"]),
                    "heldout_triplet_error": float(results["mean_test_error"][row]),
                    "std": float(results["std_test_error"][row]),
                    "folds": int(results["folds_tried"][row]),
                }
                for row, candidate in enumerate(results["params"])
            ],
            "chosen": {"loss": model.loss_, "n_components": int(model.n_components_)},
            "folds": int(model.cv),
            # fewer where the first fold left one candidate standing
            "folds_run": int(results["folds_tried"].max()),
            "why": model.selection_,
        }
        metrics["cv_triplet_error"] = float(results["mean_test_error"][best])
        notes.append(model.selection_)
    elif chooses:
        notes.append(model.selection_)
    if not model.converged_:
        notes.append(
            f"not converged: stopped at max_iter ({model.max_iter} steps) while the loss was "
            "still falling; raise max_iter (or tol) for a settled embedding"
        )
    if len(held_rows):
        metrics["heldout_triplet_error"] = learn.triplet_error(embedding, answers[held_rows])
    elif "cv_triplet_error" in metrics:
        # Every answer went into the fit: the cross-validated error is the held-out one.
        metrics["heldout_triplet_error"] = metrics["cv_triplet_error"]
    answered = np.unique(answers[fit_rows])
    metrics["items_answered"] = len(answered)
    if unbiased is not None and not unbiased.all():
        adaptive = int((~unbiased).sum())
        metrics["adaptive_answers"] = adaptive
        notes.append(
            f"held-out errors on the {len(answers) - adaptive} answers to uniformly random "
            f"questions; the {adaptive} to adaptively chosen ones (builds, proposals) are "
            "fitted only"
        )
    fitted = Fitted(
        kind="tete",
        item_ids=snapshot.item_ids,
        keys=snapshot.keys,
        estimator=model,
        coordinates=embedding,
        k_neighbors=params.get("k_neighbors", 5),
        answered=answered,
        heldout_answer_ids=snapshot.answer_ids[held_rows],
    )
    _label_by_neighbours(snapshot, fitted, metrics, seed)
    return FitOutcome(fitted, metrics, len(fit_rows), len(held_rows), notes)


def _label_by_neighbours(
    snapshot: Snapshot, fitted: Fitted, metrics: dict[str, Any], seed: int
) -> None:
    """Labels from the k nearest labelled training items in the learnt space, with a
    cross-validated accuracy, where the project has labelled classes."""
    train = snapshot.train_positions
    covered = fitted.candidates()
    train = train[np.isin(train, covered)]
    if snapshot.regression or len(train) < 2:
        return
    labels = snapshot.labels[train].astype(str)
    if len(np.unique(labels)) < 2:
        return
    fitted.train_positions, fitted.train_labels = train, labels
    splitter = _folds(labels, 5, seed)
    if fitted.kind == "smerf":
        features, featured = required_part(fitted.features), required_part(fitted.featured)
        distances = fitted.estimator.predict(features[featured], features[train])
        own = np.searchsorted(featured, train)
        distances[own, np.arange(len(train))] = np.inf  # an item is not its own neighbour
        found = fitted.labels_from_distances(distances)
        metrics["leave_one_out"] = _accuracy(found.labels[own], labels)
        predictions = _spread(found, featured, len(fitted.item_ids))
    else:
        coordinates = required_part(fitted.coordinates)
        points = coordinates[train]
        if splitter is not None:
            from sklearn.model_selection import cross_val_score
            from sklearn.neighbors import KNeighborsClassifier

            knn = KNeighborsClassifier(n_neighbors=min(fitted.k_neighbors, len(train) - 1))
            scores = cross_val_score(knn, points, labels, cv=splitter)
            metrics["cv"] = {
                "accuracy": float(scores.mean()),
                "folds": splitter.get_n_splits(),
                "items": len(train),
            }
        # Only the items the space covers get a label: DisDF's featured items, and the
        # items with answers in an embedding (the others sit where they started).
        found = fitted.labels_from_coordinates(coordinates[covered])
        predictions = _spread(found, covered, len(fitted.item_ids))
    fitted.predictions = predictions
    metrics.update(_test_metrics(snapshot, predictions))


def _spread(found: ItemPredictions, rows: np.ndarray, n: int) -> ItemPredictions:
    """Predictions for some rows laid over all n items (None elsewhere)."""
    labels = np.full(n, None, dtype=object)
    labels[rows] = found.labels
    proba = np.full((n, len(found.classes)), np.nan)
    proba[rows] = found.proba
    support = np.zeros(n, np.int64)
    support[rows] = found.support
    return ItemPredictions(found.classes, labels, proba, support)


# -- SMERF and DisDF (items with features) ----------------------------------------------


def _featured(snapshot: Snapshot, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The items' features and the positions of those that have them."""
    features = snapshot.features
    if features is None:
        raise CannotFit(f"{kind} learns from item features; the project's items have none")
    featured = np.flatnonzero(np.isfinite(features).all(axis=1))
    if len(featured) < 2:
        raise CannotFit(f"{kind} needs at least two items with features; found {len(featured)}")
    return features, featured


def fit_smerf(
    snapshot: Snapshot, params: dict[str, Any], previous: Fitted | None, progress: Progress
) -> FitOutcome:
    features, featured = _featured(snapshot, "SMERF")
    source = params.get("dissimilarity", "labels")
    seed = params.get("random_state", 0)
    if source in ("labels", "target"):
        rows = np.intersect1d(snapshot.train_positions, featured)
        if len(rows) < 2:
            raise CannotFit(
                f"SMERF with D from {source} needs labelled training items with features; "
                f"found {len(rows)}"
            )
        values = snapshot.labels[rows]
        if source == "labels":
            D = learn.dissimilarity_from_labels(values.astype(str))
        else:
            try:
                D = learn.dissimilarity_from_target(values.astype(np.float64))
            except ValueError as exc:
                raise CannotFit(f"SMERF with D from target needs numeric labels: {exc}") from exc
    else:  # "embedding" or "matrix": the service put D and its items in the snapshot
        rows, D = required_part(snapshot.dissimilarity_items), required_part(snapshot.dissimilarity)
        missing = np.setdiff1d(rows, featured)
        if len(missing):
            raise CannotFit(
                f"SMERF: {len(missing)} item(s) of D have no features, e.g. "
                f"'{snapshot.keys[missing[0]]}'"
            )
    progress(0.05, f"growing {params.get('n_estimators', 100)} trees on {len(rows)} items")
    model = learn.SMERF(
        n_estimators=params.get("n_estimators", 100),
        max_features=params.get("max_features", "sqrt"),
        min_samples_leaf=params.get("min_samples_leaf", 1),
        max_depth=params.get("max_depth"),
        random_state=seed,
    ).fit(features[rows], D)
    fitted = Fitted(
        kind="smerf",
        item_ids=snapshot.item_ids,
        keys=snapshot.keys,
        estimator=model,
        features=snapshot.features,
        featured=featured,
        k_neighbors=params.get("k_neighbors", 5),
    )
    metrics: dict[str, Any] = {"training_items": len(rows), "dissimilarity": source}
    progress(0.6, "measuring")
    _answer_agreement(snapshot, fitted, metrics, seed)
    _label_by_neighbours(snapshot, fitted, metrics, seed)
    return FitOutcome(fitted, metrics, answers_used=0, heldout=metrics.get("answers_checked", 0))


def _answer_agreement(
    snapshot: Snapshot, fitted: Fitted, metrics: dict[str, Any], seed: int, most: int = 20_000
) -> None:
    """Triplet error of the learnt metric on the raters' answers among featured items
    (answers it never saw, neither directly nor through its D: a held-out measure), on a
    seeded sample of at most `most`; answers to adaptively chosen questions are left out
    (they lean towards hard ones)."""
    rows = np.arange(len(snapshot.answers))
    if snapshot.measure_on is not None:
        rows = snapshot.measure_on
    if snapshot.adaptive is not None:
        rows = rows[~snapshot.adaptive[rows]]
    error, checked = _distance_error(fitted, snapshot.answers[rows], seed, most)
    if checked:
        metrics["heldout_triplet_error"] = error
        metrics["answers_checked"] = checked


def _distance_error(
    fitted: Fitted, answers: np.ndarray, seed: int, most: int
) -> tuple[float | None, int]:
    """Triplet error of the model's distances on the answers among the items it places,
    on a seeded sample of at most `most`, and how many answers that was."""
    covered = np.zeros(len(fitted.item_ids), bool)
    covered[fitted.candidates()] = True
    answers = answers[covered[answers].all(axis=1)]
    if len(answers) > most:
        answers = answers[np.random.default_rng(seed).choice(len(answers), most, replace=False)]
    if not len(answers):
        return None, 0
    near = fitted.pair_distances(answers[:, 0], answers[:, 1])
    far = fitted.pair_distances(answers[:, 0], answers[:, 2])
    return float(np.mean((near > far) + 0.5 * (near == far))), len(answers)


def fit_disdf(
    snapshot: Snapshot, params: dict[str, Any], previous: Fitted | None, progress: Progress
) -> FitOutcome:
    features, featured = _featured(snapshot, "DisDF")
    train, labels = _classes_needed(snapshot, "DisDF")
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
        kind="disdf",
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
    metrics.update(_test_metrics(snapshot, predictions))
    _answer_agreement(snapshot, fitted, metrics, seed)
    return FitOutcome(fitted, metrics, answers_used=0, heldout=metrics.get("answers_checked", 0))


def measure_on_test_split(
    snapshot: Snapshot, fitted: Fitted, metrics: dict[str, Any], seed: int = 0, most: int = 20_000
) -> None:
    """Triplet error on the researcher's test split (answers no fit ever sees), among the
    items the model places, on a seeded sample of at most `most`: for every model with
    distances, beside its own held-out measure."""
    if fitted.kind not in ("tete", "smerf", "disdf") or not len(snapshot.test_answers):
        return
    error, metrics["test_answers"] = _distance_error(fitted, snapshot.test_answers, seed, most)
    if error is not None:
        metrics["test_triplet_error"] = error


FITTERS: dict[str, Callable[[Snapshot, dict[str, Any], Fitted | None, Progress], FitOutcome]] = {
    "tripletboost": fit_tripletboost,
    "tete": fit_tete,
    "smerf": fit_smerf,
    "disdf": fit_disdf,
}
