"""SMERF: a random forest that learns a distance from item features and a dissimilarity
matrix (ALGORITHMS.md §4).

A node's impurity is its average pairwise dissimilarity ``Dbar(S) = sum_{a,b in S} D_ab
/ |S|^2``; a split minimises ``sum_L / |L| + sum_R / |R|`` (pair sums), which is the
impurity decrease ``Dbar(S) - |L|/|S| Dbar(L) - |R|/|S| Dbar(R)`` times ``|S|``. With
``D = [y_a != y_b]`` that is CART's Gini criterion, with ``D = (y_a - y_b)^2 / 2`` its
variance criterion. The sweep over a sorted feature keeps, for every item of the node,
its dissimilarity sum to the left side: moving one item updates it in O(|S|), so a
feature costs O(|S|^2). A tree predicts for two new items the mean dissimilarity between
the training items of their two leaves; the forest averages its trees.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from numba import njit
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, RealNotInt, StrOptions
from sklearn.utils.validation import check_is_fitted

from app.learn.oracles import FeatureOracle

LEAF = -1


@njit(cache=True, nogil=True)
def _projection_values(X, rows, features, weights):
    values = np.zeros(len(rows))
    for term in range(len(features)):
        if features[term] < 0:
            break
        column, weight = features[term], weights[term]
        for i in range(len(rows)):
            values[i] += weight * X[rows[i], column]
    return values


@njit(cache=True, nogil=True)
def _best_split(X, D, sample, members, candidates, candidate_weights, min_samples_leaf):
    """The candidate projection and threshold minimising sum_L/|L| + sum_R/|R| over the
    node's `members` (positions in `sample`, the tree's rows of X and D)."""
    size = len(members)
    rows = sample[members]
    row_sum = np.zeros(size)
    for i in range(size):
        total = 0.0
        for j in range(size):
            total += D[rows[i], rows[j]]
        row_sum[i] = total
    node_sum = row_sum.sum()
    best_score, best_candidate, best_threshold = np.inf, -1, 0.0
    to_left = np.empty(size)
    for candidate in range(candidates.shape[0]):
        if candidates[candidate, 0] < 0:
            continue  # fewer non-constant features than max_features
        values = _projection_values(X, rows, candidates[candidate], candidate_weights[candidate])
        order = np.argsort(values, kind="mergesort")
        to_left[:] = 0.0
        left_sum, right_sum = 0.0, node_sum
        for moved in range(size - 1):
            m = order[moved]
            self_d = D[rows[m], rows[m]]
            left_sum += 2.0 * to_left[m] + self_d
            right_sum -= 2.0 * (row_sum[m] - to_left[m]) - self_d
            for i in range(size):
                to_left[i] += D[rows[m], rows[i]]
            n_left = moved + 1
            if n_left < min_samples_leaf or size - n_left < min_samples_leaf:
                continue
            low, high = values[m], values[order[moved + 1]]
            if not high > low:
                continue
            score = left_sum / n_left + right_sum / (size - n_left)
            if score < best_score:
                threshold = 0.5 * (low + high)
                if threshold == high:  # as scikit-learn: midpoints that round up fall left
                    threshold = low
                best_score, best_candidate, best_threshold = score, candidate, threshold
    return best_candidate, best_threshold, best_score, node_sum


@njit(cache=True, nogil=True)
def _grow(
    X,
    D,
    sample,
    max_features,
    n_oblique,
    oblique_terms,
    min_samples_leaf,
    max_depth,
    seed,
):
    """One tree on rows `sample` of X and D. Returns the node arrays, each leaf's members
    (positions in `sample`, CSR) and the impurity decrease per feature."""
    np.random.seed(seed)
    n_features = X.shape[1]
    n = len(sample)
    capacity = 2 * n + 1
    features = np.full((capacity, oblique_terms), -1, np.int64)
    weights = np.zeros((capacity, oblique_terms))
    threshold = np.zeros(capacity)
    left = np.full(capacity, LEAF, np.int64)
    right = np.full(capacity, LEAF, np.int64)
    leaf_of_node = np.full(capacity, -1, np.int64)
    importance = np.zeros(n_features)
    order = np.arange(n)  # members of each open node are a contiguous block of `order`
    stack_node = np.empty(capacity, np.int64)
    stack_start = np.empty(capacity, np.int64)
    stack_end = np.empty(capacity, np.int64)
    stack_depth = np.empty(capacity, np.int64)
    stack_node[0], stack_start[0], stack_end[0], stack_depth[0] = 0, 0, n, 0
    top, n_nodes, n_leaves = 1, 1, 0
    leaf_start = np.zeros(capacity + 1, np.int64)
    leaf_members = np.empty(n, np.int64)
    n_candidates = max_features + n_oblique
    candidates = np.full((n_candidates, oblique_terms), -1, np.int64)
    candidate_weights = np.zeros((n_candidates, oblique_terms))
    while top > 0:
        top -= 1
        node, start, end, depth = (
            stack_node[top],
            stack_start[top],
            stack_end[top],
            stack_depth[top],
        )
        members = order[start:end].copy()
        size = end - start
        split = -1
        if size >= 2 * min_samples_leaf and size >= 2 and (max_depth < 0 or depth < max_depth):
            candidates[:] = -1
            candidate_weights[:] = 0.0
            # As scikit-learn: features constant in the node do not count towards
            # max_features, so a node is not left unsplit for drawing only those.
            n_chosen = 0
            rows = sample[members]
            for feature in np.random.permutation(n_features):
                if n_chosen == max_features:
                    break
                low, high = X[rows[0], feature], X[rows[0], feature]
                for i in range(1, size):
                    low, high = min(low, X[rows[i], feature]), max(high, X[rows[i], feature])
                if high > low:
                    candidates[n_chosen, 0], candidate_weights[n_chosen, 0] = feature, 1.0
                    n_chosen += 1
            for c in range(max_features, n_candidates):
                terms = np.random.permutation(n_features)[: min(oblique_terms, n_features)]
                for term in range(len(terms)):
                    candidates[c, term] = terms[term]
                    candidate_weights[c, term] = 1.0 if np.random.random() < 0.5 else -1.0
            split, cut, score, node_sum = _best_split(
                X, D, sample, members, candidates, candidate_weights, min_samples_leaf
            )
            if node_sum <= 0.0:
                split = -1  # every pair at dissimilarity 0: nothing to separate
        if split < 0:
            leaf_of_node[node] = n_leaves
            leaf_members[leaf_start[n_leaves] : leaf_start[n_leaves] + size] = members
            leaf_start[n_leaves + 1] = leaf_start[n_leaves] + size
            n_leaves += 1
            continue
        features[node], weights[node], threshold[node] = (
            candidates[split],
            candidate_weights[split],
            cut,
        )
        values = _projection_values(X, sample[members], candidates[split], candidate_weights[split])
        goes_left = values <= cut
        n_left = goes_left.sum()
        order[start : start + n_left] = members[goes_left]
        order[start + n_left : end] = members[~goes_left]
        # Impurity decrease, weighted by the node's share of the tree's items.
        # An oblique split shares it among its features; an axis-aligned one has one.
        decrease = (node_sum / size - score) / n
        used = candidates[split][candidates[split] >= 0]
        for feature in used:
            importance[feature] += decrease / len(used)
        left[node], right[node] = n_nodes, n_nodes + 1
        stack_node[top], stack_start[top], stack_end[top], stack_depth[top] = (
            n_nodes + 1,
            start + n_left,
            end,
            depth + 1,
        )
        stack_node[top + 1], stack_start[top + 1], stack_end[top + 1], stack_depth[top + 1] = (
            n_nodes,
            start,
            start + n_left,
            depth + 1,
        )
        top += 2
        n_nodes += 2
    return (
        features[:n_nodes].copy(),
        weights[:n_nodes].copy(),
        threshold[:n_nodes].copy(),
        left[:n_nodes].copy(),
        right[:n_nodes].copy(),
        leaf_of_node[:n_nodes].copy(),
        leaf_start[: n_leaves + 1].copy(),
        leaf_members,
        importance,
    )


@njit(cache=True, nogil=True)
def _apply(X, features, weights, threshold, left, right, leaf_of_node):
    """The leaf of each row of X."""
    leaves = np.empty(X.shape[0], np.int64)
    for i in range(X.shape[0]):
        node = 0
        while left[node] != LEAF:
            value = 0.0
            for term in range(features.shape[1]):
                if features[node, term] < 0:
                    break
                value += weights[node, term] * X[i, features[node, term]]
            node = left[node] if value <= threshold[node] else right[node]
        leaves[i] = leaf_of_node[node]
    return leaves


@njit(cache=True, nogil=True)
def _add_distances(out, D, sample, leaf_start, leaf_members, leaves_1, leaves_2):
    """Add one tree's distances: the mean of D over the training items of the two
    leaves, computed only for the leaf pairs that occur (at most |sample|^2 work)."""
    n_leaves = len(leaf_start) - 1
    index_1 = np.full(n_leaves, -1, np.int64)
    index_2 = np.full(n_leaves, -1, np.int64)
    used_1, used_2 = [], []
    for leaf in leaves_1:
        if index_1[leaf] < 0:
            index_1[leaf] = len(used_1)
            used_1.append(leaf)
    for leaf in leaves_2:
        if index_2[leaf] < 0:
            index_2[leaf] = len(used_2)
            used_2.append(leaf)
    means = np.zeros((len(used_1), len(used_2)))
    for u in range(len(used_1)):
        la = used_1[u]
        for v in range(len(used_2)):
            lb = used_2[v]
            total = 0.0
            for at_a in range(leaf_start[la], leaf_start[la + 1]):
                row = sample[leaf_members[at_a]]
                for at_b in range(leaf_start[lb], leaf_start[lb + 1]):
                    total += D[row, sample[leaf_members[at_b]]]
            size = (leaf_start[la + 1] - leaf_start[la]) * (leaf_start[lb + 1] - leaf_start[lb])
            means[u, v] = total / size
    for i in range(len(leaves_1)):
        row_means = means[index_1[leaves_1[i]]]
        for j in range(len(leaves_2)):
            out[i, j] += row_means[index_2[leaves_2[j]]]


def check_dissimilarity(D, n_items: int | None = None) -> np.ndarray:
    """`D` as a float64 square, symmetric, finite, non-negative matrix, or ValueError."""
    D = np.asarray(D, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1]:
        raise ValueError(f"D must be a square matrix; got shape {D.shape}")
    if n_items is not None and D.shape[0] != n_items:
        raise ValueError(f"D must be {n_items} x {n_items}, one row per item of X; got {D.shape}")
    if not np.all(np.isfinite(D)):
        row, column = np.argwhere(~np.isfinite(D))[0]
        raise ValueError(f"D contains NaN or infinite values (first at [{row}, {column}])")
    if not np.allclose(D, D.T, rtol=1e-10, atol=1e-12):
        row, column = np.unravel_index(np.argmax(np.abs(D - D.T)), D.shape)
        raise ValueError(
            f"D must be symmetric; D[{row}, {column}] = {D[row, column]} but "
            f"D[{column}, {row}] = {D[column, row]}"
        )
    if D.min() < 0:
        raise ValueError("D must be non-negative (a dissimilarity)")
    return _read_only(D)


def _read_only(D: np.ndarray) -> np.ndarray:
    """D as the one array type the kernels are compiled for: C order, read-only (a view:
    the holder's array keeps its flags). An uploaded matrix is read-only and a stored
    model's is not; a kernel's first call with a type the worker's warm-up did not
    compile compiles it anew, for seconds, in the middle of a fit or a request."""
    view = np.ascontiguousarray(D, dtype=np.float64).view()
    view.setflags(write=False)
    return view


class SMERF(BaseEstimator):
    """Similarity and metric random forest (Sadeghi-Naini et al.; ALGORITHMS.md §4).

    Parameters
    ----------
    n_estimators : trees.
    max_features : features tried per node: an int, a share in (0, 1], "sqrt", "log2"
        or None (all).
    min_samples_leaf : fewest training items in a leaf.
    max_depth : None grows until leaves are pure or too small.
    bootstrap : draw each tree's items with replacement (else a subsample without).
    max_samples : items per tree, as a share of n (None: n with bootstrap, else all).
    n_oblique : extra candidates per node that are sparse random projections.
    oblique_terms : features in each projection (weights ±1).
    random_state : seed.

    ``fit(X, D)`` with an n x n symmetric dissimilarity ``D``; ``predict(X1, X2=None)``
    returns the forest's distances between rows of X1 and X2 (X1 with itself when X2 is
    None); ``feature_importances_`` sums the impurity decrease per feature.
    """

    _parameter_constraints: dict = {
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "max_features": [
            Interval(Integral, 1, None, closed="left"),
            Interval(RealNotInt, 0, 1, closed="right"),
            StrOptions({"sqrt", "log2"}),
            None,
        ],
        "min_samples_leaf": [Interval(Integral, 1, None, closed="left")],
        "max_depth": [Interval(Integral, 1, None, closed="left"), None],
        "bootstrap": ["boolean"],
        "max_samples": [Interval(Real, 0, 1, closed="right"), None],
        "n_oblique": [Interval(Integral, 0, None, closed="left")],
        "oblique_terms": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_estimators: int = 100,
        max_features="sqrt",
        min_samples_leaf: int = 1,
        max_depth: int | None = None,
        bootstrap: bool = True,
        max_samples: float | None = None,
        n_oblique: int = 0,
        oblique_terms: int = 2,
        random_state=None,
    ) -> None:
        self.n_estimators = n_estimators
        self.max_features = max_features
        self.min_samples_leaf = min_samples_leaf
        self.max_depth = max_depth
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.n_oblique = n_oblique
        self.oblique_terms = oblique_terms
        self.random_state = random_state

    def _n_features_tried(self, n_features: int) -> int:
        value: Any = self.max_features
        if value is None:
            return n_features
        if value == "sqrt":
            return max(1, int(np.sqrt(n_features)))
        if value == "log2":
            return max(1, int(np.log2(n_features)))
        if isinstance(value, Integral):  # (the parameter's constraints hold: fit checked)
            return min(int(value), n_features)
        return max(1, int(float(value) * n_features))  # a share in (0, 1]

    def fit(self, X, D) -> SMERF:
        self._validate_params()
        X = np.ascontiguousarray(X, dtype=np.float64)  # a column slice: one kernel type
        if X.ndim != 2 or X.shape[0] < 2:
            raise ValueError(f"X must be 2-dimensional with at least 2 rows; got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinite values")
        D = check_dissimilarity(D, X.shape[0])
        n, n_features = X.shape
        tried = self._n_features_tried(n_features)
        terms = min(self.oblique_terms, n_features) if self.n_oblique else 1
        rng = check_random_state(self.random_state)
        per_tree = n if self.max_samples is None else max(2, int(round(self.max_samples * n)))
        self.trees_ = []
        importance = np.zeros(n_features)
        for _ in range(self.n_estimators):
            if self.bootstrap:
                sample = rng.randint(0, n, size=per_tree)
            else:
                sample = np.sort(rng.permutation(n)[:per_tree])
            grown = _grow(
                X,
                D,
                sample.astype(np.int64),
                tried,
                int(self.n_oblique),
                terms,
                int(self.min_samples_leaf),
                -1 if self.max_depth is None else int(self.max_depth),
                int(rng.randint(0, 2**31 - 1)),
            )
            *nodes, leaf_start, leaf_members, tree_importance = grown
            self.trees_.append((*nodes, sample, leaf_start, leaf_members))
            importance += tree_importance
        total = importance.sum()
        self.feature_importances_ = importance / total if total > 0 else importance
        self.n_features_in_ = n_features
        self.dissimilarity_ = D  # leaf-pair means are taken from it when predicting
        return self

    def apply(self, X) -> np.ndarray:
        """Leaf index of each row of X in each tree: (n_rows, n_estimators)."""
        check_is_fitted(self, "trees_")
        X = self._check_X(X, "X")
        return np.stack([_apply(X, *tree[:6]) for tree in self.trees_], axis=1)

    def _check_X(self, X, name: str) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"{name} must have shape (n, {self.n_features_in_}), as the training X; "
                f"got {X.shape}"
            )
        if not np.all(np.isfinite(X)):
            raise ValueError(f"{name} contains NaN or infinite values")
        return X

    def predict(self, X1, X2=None) -> np.ndarray:
        """Forest distances between the rows of X1 and of X2 (or X1): (n1, n2)."""
        check_is_fitted(self, "trees_")
        X1 = self._check_X(X1, "X1")
        X2 = X1 if X2 is None else self._check_X(X2, "X2")
        out = np.zeros((len(X1), len(X2)))
        D = _read_only(self.dissimilarity_)
        for tree in self.trees_:
            nodes, leaf_parts = tree[:6], tree[6:]
            leaves_1 = _apply(X1, *nodes)
            leaves_2 = leaves_1 if X2 is X1 else _apply(X2, *nodes)
            # numba's dispatcher is typed as taking fewer arguments than its kernels do
            _add_distances(out, D, *leaf_parts, leaves_1, leaves_2)  # type: ignore[call-arg]
        return out / len(self.trees_)


def dissimilarity_from_labels(y) -> np.ndarray:
    """``D_ab = [y_a != y_b]``: SMERF then grows CART's Gini trees."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-dimensional; got shape {y.shape}")
    return (y[:, None] != y[None, :]).astype(np.float64)


def dissimilarity_from_target(y) -> np.ndarray:
    """``D_ab = (y_a - y_b)^2 / 2``: SMERF then grows CART's variance trees."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or not np.all(np.isfinite(y)):
        raise ValueError("the target must be a 1-dimensional array of finite numbers")
    return (y[:, None] - y[None, :]) ** 2 / 2


def dissimilarity_from_embedding(embedding, metric: str = "euclidean") -> np.ndarray:
    """Distances between the rows of an embedding (e.g. t-ETE's of human answers)."""
    from sklearn.metrics import pairwise_distances

    embedding = np.asarray(embedding, dtype=np.float64)
    if embedding.ndim != 2 or not np.all(np.isfinite(embedding)):
        raise ValueError("the embedding must be a 2-dimensional array of finite numbers")
    D = pairwise_distances(embedding, metric=metric)
    return (D + D.T) / 2  # exact symmetry despite rounding


def dissimilarity_from_adjacency(A) -> np.ndarray:
    """``1 - A`` for a symmetric link or similarity matrix with entries in [0, 1]."""
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"the adjacency matrix must be square; got shape {A.shape}")
    if not np.all(np.isfinite(A)) or A.min() < 0 or A.max() > 1:
        raise ValueError("adjacency entries must be numbers in [0, 1]")
    if not np.allclose(A, A.T):
        raise ValueError("the adjacency matrix must be symmetric")
    D = 1.0 - (A + A.T) / 2
    np.fill_diagonal(D, 0.0)
    return D


class SMERFOracle(FeatureOracle):
    """Answers "is a closer to p or to q?" from item features alone, with a fitted SMERF's
    distances (computed once for all items: n^2 memory), optionally flipped at `noise`."""

    def __init__(self, model: SMERF, X, noise: float = 0.0, random_state=None) -> None:
        check_is_fitted(model, "trees_")
        super().__init__(
            model.predict(X), metric="precomputed", noise=noise, random_state=random_state
        )
        self.model = model
