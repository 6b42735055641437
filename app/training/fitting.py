"""What every fit shares: the snapshot of a project it reads, what it gives back, and the
measures and splits the kinds' fits (app/training/kinds) use.

No database here: the service reads a `Snapshot` (items in id order, answers as
positions) and stores what comes back. Every random choice is seeded from the model's
`random_state`, so the same answers give the same version, and an offline run of the
library on the same answers gives the same figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from app.training.fitted import Fitted, ItemPredictions, required_part

if TYPE_CHECKING:
    from app.learn.choices import Choices

Progress = Callable[[float, str], None]
# Items a block of distances to the labelled ones holds at once.
DISTANCE_ROWS = 2048


class CannotFit(ValueError):
    """The project's data cannot support this model (too few labels, no features, …)."""


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
    # Every answer as the choice its person made (the choice model): screens of a format
    # learned whole as their choices, the rest as their triplets; each choice's judgement
    # is its answers' group (`groups`, or -(row + 1) for an answer of its own).
    choices: Choices | None = None
    # How many screens of each format `choices` learned whole.
    screens_learned_whole: dict[str, int] = field(default_factory=dict)

    @property
    def train_positions(self) -> np.ndarray:
        return np.flatnonzero(self.is_train)

    def answer_groups(self) -> np.ndarray:
        """Per answer, its judgement's id, or -(row + 1) for an answer of its own."""
        if self.groups is not None:
            return self.groups
        return -np.arange(1, len(self.answers) + 1, dtype=np.int64)

    def subset(self, rows: np.ndarray) -> Snapshot:
        """The snapshot with only the answers at `rows` (ascending), as a fit on those
        alone would read it: their judgements' choices, their groups as they were (an
        answer of its own keeps its label)."""
        groups = self.answer_groups()[rows]
        choices = self.choices
        if choices is not None:
            choices = choices.take(np.flatnonzero(np.isin(choices.judgement, groups)))
        measure_on = self.measure_on
        if measure_on is not None:
            measure_on = np.flatnonzero(np.isin(rows, measure_on))
        return replace(
            self,
            answers=self.answers[rows],
            answer_ids=self.answer_ids[rows],
            adaptive=None if self.adaptive is None else self.adaptive[rows],
            groups=groups,
            choices=choices,
            measure_on=measure_on,
            screens_learned_whole={},
        )


@dataclass
class FitOutcome:
    fitted: Fitted
    metrics: dict[str, Any]
    answers_used: int
    heldout: int = 0
    notes: list[str] = field(default_factory=list)


def classes_needed(snapshot: Snapshot, kind: str) -> tuple[np.ndarray, np.ndarray]:
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


def accuracy_of(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float | int | None]:
    spoke = np.array([label is not None for label in predicted], dtype=bool)
    correct = np.array(
        [p == t for p, t in zip(predicted[spoke], truth[spoke], strict=True)], dtype=bool
    )
    return {
        "accuracy": float(correct.mean()) if len(correct) else None,
        "coverage": float(spoke.mean()) if len(spoke) else None,
        "items": len(truth),
    }


def test_split_metrics(snapshot: Snapshot, predictions: ItemPredictions) -> dict[str, Any]:
    test = np.flatnonzero(snapshot.is_test & np.array([x is not None for x in snapshot.labels]))
    if not len(test):
        return {}
    return {"test": accuracy_of(predictions.labels[test], snapshot.labels[test].astype(str))}


def stratified_folds(labels: np.ndarray, wanted: int, seed: int):
    counts = np.unique(labels, return_counts=True)[1]
    folds = int(min(wanted, counts.min()))
    if folds < 2:
        return None
    from sklearn.model_selection import StratifiedKFold

    return StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)


# -- held-out answers, labels from neighbours ---------------------------------------------


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


def label_by_neighbours(
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
    splitter = stratified_folds(labels, 5, seed)
    if fitted.coordinates is None or fitted.similarity is not None:
        # Distances from the estimator (SMERF) or a similarity (the choice model's dot
        # products), in blocks of rows: a block of every item against every labelled one
        # at once could take gigabytes.
        own = np.searchsorted(covered, train)
        parts = []
        for start in range(0, len(covered), DISTANCE_ROWS):
            rows = covered[start : start + DISTANCE_ROWS]
            distances = fitted.distance_block(rows, train)
            mine = (own >= start) & (own < start + len(rows))
            # an item is not its own neighbour
            distances[own[mine] - start, np.flatnonzero(mine)] = np.inf
            parts.append(fitted.labels_from_distances(distances))
        found = ItemPredictions(
            parts[0].classes,
            np.concatenate([part.labels for part in parts]),
            np.concatenate([part.proba for part in parts]),
            np.concatenate([part.support for part in parts]),
        )
        metrics["leave_one_out"] = accuracy_of(found.labels[own], labels)
        predictions = spread(found, covered, len(fitted.item_ids))
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
        predictions = spread(found, covered, len(fitted.item_ids))
    fitted.predictions = predictions
    metrics.update(test_split_metrics(snapshot, predictions))


def spread(found: ItemPredictions, rows: np.ndarray, n: int) -> ItemPredictions:
    """Predictions for some rows laid over all n items (None elsewhere)."""
    labels = np.full(n, None, dtype=object)
    labels[rows] = found.labels
    proba = np.full((n, len(found.classes)), np.nan)
    proba[rows] = found.proba
    support = np.zeros(n, np.int64)
    support[rows] = found.support
    return ItemPredictions(found.classes, labels, proba, support)


# -- SMERF and DisDF (items with features) ----------------------------------------------


def featured_items(snapshot: Snapshot, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The items' features and the positions of those that have them."""
    features = snapshot.features
    if features is None:
        raise CannotFit(f"{kind} learns from item features; the project's items have none")
    featured = np.flatnonzero(np.isfinite(features).all(axis=1))
    if len(featured) < 2:
        raise CannotFit(f"{kind} needs at least two items with features; found {len(featured)}")
    return features, featured


def answer_agreement(
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
    error, checked = distance_error(fitted, snapshot.answers[rows], seed, most)
    if checked:
        metrics["heldout_triplet_error"] = error
        metrics["answers_checked"] = checked


def placed_answers(fitted: Fitted, answers: np.ndarray) -> np.ndarray:
    """Per answer: whether the model places all three of its items."""
    covered = np.zeros(len(fitted.item_ids), bool)
    covered[fitted.candidates()] = True
    return covered[answers].all(axis=1)


def answer_losses(fitted: Fitted, answers: np.ndarray) -> np.ndarray:
    """The model's loss on each answer: 1 where its distances disagree, 0.5 on a tie or
    where it places the answer's items not (a coin)."""
    from app.learn.gain import losses_per_answer  # scikit-learn: loaded where fits run

    placed = placed_answers(fitted, answers)
    near, far = np.zeros(len(answers)), np.zeros(len(answers))
    if placed.any():
        shown = answers[placed]
        near[placed] = fitted.pair_distances(shown[:, 0], shown[:, 1])
        far[placed] = fitted.pair_distances(shown[:, 0], shown[:, 2])
    return losses_per_answer(near, far, placed)


def distance_error(
    fitted: Fitted, answers: np.ndarray, seed: int, most: int
) -> tuple[float | None, int]:
    """Triplet error of the model's distances on the answers among the items it places,
    on a seeded sample of at most `most`, and how many answers that was."""
    answers = answers[placed_answers(fitted, answers)]
    if len(answers) > most:
        answers = answers[np.random.default_rng(seed).choice(len(answers), most, replace=False)]
    if not len(answers):
        return None, 0
    return float(answer_losses(fitted, answers).mean()), len(answers)


def measure_on_test_split(
    snapshot: Snapshot, fitted: Fitted, metrics: dict[str, Any], seed: int = 0, most: int = 20_000
) -> None:
    """Triplet error on the researcher's test split (answers no fit ever sees), among the
    items the model places, on a seeded sample of at most `most`: for a model with
    distances, beside its own held-out measure."""
    if not len(snapshot.test_answers):
        return
    error, metrics["test_answers"] = distance_error(fitted, snapshot.test_answers, seed, most)
    if error is not None:
        metrics["test_triplet_error"] = error
