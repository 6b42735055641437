"""SMERF: its splits are CART's for the matching dissimilarities, and its distances work."""

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from app.learn.smerf import SMERF


def same_tree(ours, theirs, X, D) -> int:
    """Walk both trees from the root: every node splits its items into the same two
    sides as scikit-learn's (whatever feature does it, either way round), or, where
    scikit-learn broke a tie between different sides, into sides of the same criterion
    value. Returns the count of such ties."""
    features, _, threshold, left, right, _ = ours
    tree = theirs.tree_
    reach = theirs.decision_path(X.astype(np.float32)).tocsc()

    def score(members, goes_left):
        return sum(
            D[np.ix_(side, side)].sum() / len(side)
            for side in (members[goes_left], members[~goes_left])
        )

    pending, ties = [(0, 0)], 0
    while pending:
        mine, node = pending.pop()
        if tree.children_left[node] == -1:
            assert left[mine] == -1, f"scikit-learn made a leaf at its node {node}"
            continue
        assert left[mine] != -1, f"SMERF made a leaf where scikit-learn split node {node}"
        members = reach[:, node].nonzero()[0]
        our_side = X[members, features[mine, 0]] <= threshold[mine]
        their_side = X[members, tree.feature[node]] <= tree.threshold[node]
        if np.array_equal(our_side, ~their_side):  # the same two sides, mirrored
            pending += [
                (left[mine], tree.children_right[node]),
                (right[mine], tree.children_left[node]),
            ]
            continue
        if not np.array_equal(our_side, their_side):
            assert score(members, our_side) == pytest.approx(
                score(members, their_side), abs=1e-9
            ), f"a worse split than scikit-learn's at its node {node}"
            ties += 1
            continue
        pending += [
            (left[mine], tree.children_left[node]),
            (right[mine], tree.children_right[node]),
        ]
    return ties


def float32_features(n, p, seed):
    # scikit-learn's trees work in float32: give both the same representable values
    return np.random.default_rng(seed).normal(size=(n, p)).astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("min_samples_leaf", [1, 5])
def test_label_dissimilarity_splits_as_the_gini_tree(min_samples_leaf):
    """Small pure nodes often have several perfect splits; those ties aside, every split
    is scikit-learn's."""
    X = float32_features(200, 5, 0)
    y = X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.3 * np.random.default_rng(1).normal(size=200) > 0.4
    y = y.astype(int) + (X[:, 2] > 1)
    D = (y[:, None] != y[None, :]).astype(float)
    ours = SMERF(1, max_features=None, bootstrap=False, min_samples_leaf=min_samples_leaf)
    ours.fit(X, D)
    theirs = DecisionTreeClassifier(min_samples_leaf=min_samples_leaf, random_state=0).fit(X, y)
    assert same_tree(ours.trees_[0][:6], theirs, X, D) <= 10


@pytest.mark.parametrize("max_depth", [None, 4])
def test_squared_difference_splits_as_the_variance_tree(max_depth):
    X = float32_features(150, 4, 2)
    y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * np.random.default_rng(3).normal(size=150)
    D = (y[:, None] - y[None, :]) ** 2 / 2
    ours = SMERF(1, max_features=None, bootstrap=False, max_depth=max_depth).fit(X, D)
    theirs = DecisionTreeRegressor(max_depth=max_depth, random_state=0).fit(X, y)
    assert same_tree(ours.trees_[0][:6], theirs, X, D) == 0  # continuous y: no ties
