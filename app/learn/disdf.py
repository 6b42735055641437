"""DisDF: a gcForest cascade whose forests weigh their trees so that items of one class
come close and items of different classes move apart (Utkin & Ryabinin; ALGORITHMS.md §5).

Each level holds random forests and completely-random forests (scikit-learn's
`RandomForestClassifier` and `ExtraTreesClassifier` with one feature per split). Class
vectors come from k-fold cross-fitting: each fold's forests are trained on the other
folds and describe the fold's items, so the next level never sees an item described by
trees that learnt its label. A forest's class vector is the weighted sum of its trees'
class probabilities, ``v = sum_t w_t p^(t)``, with ``w`` on the unit simplex learnt by
Frank–Wolfe on the convex objective (averaged over the sampled pairs, so ``lam`` and
``tau`` do not depend on their number)::

    J(w) = mean_same sum_t P_ab^(t) w_t^2 + mean_diff max(0, tau - sum_t Q_ab^(t) w_t)^2
           + lam ||w||^2,   P = ||p_a - p_b||_2^2,  Q = ||p_a - p_b||_1

As in the paper, a fold forest's weights are learnt on the items it describes (its trees
never saw them; the weights, on a simplex, are all that is fitted to their labels).
``weighted=False`` keeps the plain average: the gcForest cascade, same code. Levels are
added while the cross-fitted accuracy of the training items improves. New items are
described by every fold's forests, averaged.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.ensemble import ExtraTreesClassifier, RandomForestClassifier
from sklearn.metrics import pairwise_distances
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from app.learn.oracles import FeatureOracle


def tree_probabilities(forest, X) -> np.ndarray:
    """Each tree's class probabilities: (n_trees, n_items, n_classes)."""
    return np.stack([tree.predict_proba(X) for tree in forest.estimators_])


def pair_terms(probabilities: np.ndarray, first, second) -> tuple[np.ndarray, np.ndarray]:
    """P (squared euclidean) and Q (manhattan) per pair and tree: (n_pairs, n_trees)."""
    difference = probabilities[:, first] - probabilities[:, second]
    return (difference**2).sum(axis=2).T, np.abs(difference).sum(axis=2).T


def objective(w, P_same, Q_diff, tau: float, lam: float) -> float:
    """J(w) of ALGORITHMS.md §5, averaged over the pairs of each kind."""
    same = (P_same @ (w**2)).mean() if len(P_same) else 0.0
    slack = np.maximum(0.0, tau - Q_diff @ w)
    different = (slack**2).mean() if len(Q_diff) else 0.0
    return float(same + different + lam * w @ w)


def gradient(w, P_same, Q_diff, tau: float, lam: float) -> np.ndarray:
    slack = np.maximum(0.0, tau - Q_diff @ w)
    grad = 2 * w * lam
    if len(P_same):
        grad += 2 * w * P_same.mean(axis=0)
    if len(Q_diff):
        grad -= 2 * (slack @ Q_diff) / len(Q_diff)
    return grad


def frank_wolfe(P_same, Q_diff, tau: float, lam: float, n_iter: int) -> np.ndarray:
    """Minimise J over the unit simplex from the plain average: the linear step is the
    vertex of the smallest gradient entry, the step size 2 / (s + 2)."""
    n_trees = P_same.shape[1] if len(P_same) else Q_diff.shape[1]
    w = np.full(n_trees, 1.0 / n_trees)
    for step in range(n_iter):
        vertex = int(np.argmin(gradient(w, P_same, Q_diff, tau, lam)))
        gamma = 2.0 / (step + 2.0)
        w *= 1.0 - gamma
        w[vertex] += gamma
    return w


def sample_pairs(y, max_pairs: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """All pairs of different items, or `max_pairs` of them drawn uniformly."""
    n = len(y)
    if n * (n - 1) // 2 <= max_pairs:
        first, second = np.triu_indices(n, 1)
        return first, second
    first = rng.randint(0, n, size=max_pairs)
    second = (first + rng.randint(1, n, size=max_pairs)) % n
    return first, second


class DisDF(ClassifierMixin, TransformerMixin, BaseEstimator):
    """Discriminative deep forest: a classifier whose cascade output is a learnt metric.

    Parameters
    ----------
    n_estimators : trees per forest.
    n_forests : forests of each kind per level (random and completely random).
    max_levels : most cascade levels.
    early_stopping : stop adding levels once the cross-fitted accuracy stops improving
        (False builds `max_levels` levels).
    n_folds : folds of the cross-fitting.
    weighted : learn the tree weights (DisDF); False averages the trees (gcForest).
    tau, lam : margin and ridge of the weight objective.
    fw_iter : Frank–Wolfe steps.
    max_pairs : pairs sampled per forest for the weights (all pairs when fewer).
    min_samples_leaf : of every tree.
    random_state : seed.

    Attributes: ``classes_``, ``n_levels_``, ``level_accuracy_`` (cross-fitted accuracy
    after each level built), ``weights_`` (per level, per fold, per forest).
    """

    _parameter_constraints: dict = {
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "n_forests": [Interval(Integral, 1, None, closed="left")],
        "max_levels": [Interval(Integral, 1, None, closed="left")],
        "early_stopping": ["boolean"],
        "n_folds": [Interval(Integral, 2, None, closed="left")],
        "weighted": ["boolean"],
        "tau": [Interval(Real, 0, None, closed="left")],
        "lam": [Interval(Real, 0, None, closed="left")],
        "fw_iter": [Interval(Integral, 1, None, closed="left")],
        "max_pairs": [Interval(Integral, 1, None, closed="left")],
        "min_samples_leaf": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_estimators: int = 100,
        n_forests: int = 2,
        max_levels: int = 5,
        early_stopping: bool = True,
        n_folds: int = 3,
        weighted: bool = True,
        tau: float = 1.0,
        lam: float = 0.01,
        fw_iter: int = 100,
        max_pairs: int = 5000,
        min_samples_leaf: int = 1,
        random_state=None,
    ) -> None:
        self.n_estimators = n_estimators
        self.n_forests = n_forests
        self.max_levels = max_levels
        self.early_stopping = early_stopping
        self.n_folds = n_folds
        self.weighted = weighted
        self.tau = tau
        self.lam = lam
        self.fw_iter = fw_iter
        self.max_pairs = max_pairs
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state

    def _forests(self, rng) -> list:
        made = []
        for _ in range(self.n_forests):
            for kind, features in ((RandomForestClassifier, "sqrt"), (ExtraTreesClassifier, 1)):
                made.append(
                    kind(
                        n_estimators=self.n_estimators,
                        max_features=features,
                        min_samples_leaf=self.min_samples_leaf,
                        random_state=rng.randint(0, 2**31 - 1),
                    )
                )
        return made

    def _weights(self, probabilities, y, rng) -> np.ndarray:
        n_trees = probabilities.shape[0]
        if not self.weighted or len(y) < 2:
            return np.full(n_trees, 1.0 / n_trees)
        first, second = sample_pairs(y, self.max_pairs, rng)
        P, Q = pair_terms(probabilities, first, second)
        same = y[first] == y[second]
        return frank_wolfe(P[same], Q[~same], self.tau, self.lam, self.fw_iter)

    def fit(self, X, y) -> DisDF:
        self._validate_params()
        X, y = validate_data(self, X, y)
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"DisDF needs at least 2 classes; got {len(self.classes_)} class")
        rng = check_random_state(self.random_state)
        n_classes = len(self.classes_)
        smallest = np.bincount(encoded).min()
        folds = min(self.n_folds, len(y))
        if smallest >= folds:
            splitter = StratifiedKFold(folds, shuffle=True, random_state=rng.randint(2**31 - 1))
        else:  # a class too rare to stratify: plain folds
            splitter = KFold(folds, shuffle=True, random_state=rng.randint(2**31 - 1))
        self.levels_, self.weights_, self.level_accuracy_ = [], [], []
        features = X
        best_accuracy = -1.0
        for _ in range(self.max_levels):
            level, level_weights = [], []
            vectors = np.zeros((len(y), 2 * self.n_forests * n_classes))
            for train, held in splitter.split(X, encoded):
                fold_forests, fold_weights = [], []
                for position, forest in enumerate(self._forests(rng)):
                    forest.fit(features[train], encoded[train])
                    probabilities = self._aligned(forest, features[held], n_classes)
                    w = self._weights(probabilities, encoded[held], rng)
                    columns = slice(position * n_classes, (position + 1) * n_classes)
                    vectors[held, columns] = np.tensordot(w, probabilities, axes=1)
                    fold_forests.append(forest)
                    fold_weights.append(w)
                level.append(fold_forests)
                level_weights.append(fold_weights)
            voted = np.argmax(self._class_sums(vectors, n_classes), axis=1)
            accuracy = float(np.mean(voted == encoded))
            if accuracy <= best_accuracy and self.early_stopping:
                break
            best_accuracy = accuracy
            self.levels_.append(level)
            self.weights_.append(level_weights)
            self.level_accuracy_.append(accuracy)
            features = np.hstack([X, vectors])
        self.n_levels_ = len(self.levels_)
        return self

    @staticmethod
    def _aligned(forest, X, n_classes: int) -> np.ndarray:
        """Tree probabilities over all classes, even if a fold lacked some."""
        probabilities = tree_probabilities(forest, X)
        if probabilities.shape[2] == n_classes:
            return probabilities
        full = np.zeros(probabilities.shape[:2] + (n_classes,))
        full[:, :, forest.classes_.astype(int)] = probabilities
        return full

    @staticmethod
    def _class_sums(vectors: np.ndarray, n_classes: int) -> np.ndarray:
        """Each class's share summed over the level's forests: the cascade's vote."""
        return vectors.reshape(len(vectors), -1, n_classes).sum(axis=1)

    def transform(self, X) -> np.ndarray:
        """The last level's class vectors: the learnt representation (a metric space)."""
        check_is_fitted(self, "levels_")
        X = validate_data(self, X, reset=False)
        n_classes = len(self.classes_)
        features = X
        for level, level_weights in zip(self.levels_, self.weights_, strict=True):
            vectors = np.zeros((len(X), 2 * self.n_forests * n_classes))
            for fold_forests, fold_weights in zip(level, level_weights, strict=True):
                for position, (forest, w) in enumerate(
                    zip(fold_forests, fold_weights, strict=True)
                ):
                    probabilities = self._aligned(forest, features, n_classes)
                    columns = slice(position * n_classes, (position + 1) * n_classes)
                    vectors[:, columns] += np.tensordot(w, probabilities, axes=1) / len(level)
            features = np.hstack([X, vectors])
        return vectors

    def predict_proba(self, X) -> np.ndarray:
        check_is_fitted(self, "levels_")
        n_classes = len(self.classes_)
        summed = self._class_sums(self.transform(X), n_classes)
        return summed / summed.sum(axis=1, keepdims=True)

    def predict(self, X) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def pairwise_distances(self, X1, X2=None, metric: str = "euclidean") -> np.ndarray:
        """Distances between items in the learnt representation."""
        first = self.transform(X1)
        return pairwise_distances(first, first if X2 is None else self.transform(X2), metric=metric)

    def kneighbors(self, X, reference, n_neighbors: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """The `n_neighbors` rows of `reference` nearest to each row of `X`: (distances,
        indices), both (n, n_neighbors)."""
        distances = self.pairwise_distances(X, reference)
        n_neighbors = min(n_neighbors, distances.shape[1])
        indices = np.argsort(distances, axis=1, kind="stable")[:, :n_neighbors]
        return np.take_along_axis(distances, indices, axis=1), indices

    def oracle(self, X, noise: float = 0.0, random_state=None) -> FeatureOracle:
        """Answers triplet queries about the rows of X in the learnt metric."""
        return FeatureOracle(self.transform(X), noise=noise, random_state=random_state)
