"""SMERF: its splits are CART's for the matching dissimilarities, and its distances work."""

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.exceptions import NotFittedError
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from app.learn import FeatureOracle, random_queries
from app.learn.smerf import (
    SMERF,
    SMERFOracle,
    dissimilarity_from_adjacency,
    dissimilarity_from_embedding,
    dissimilarity_from_labels,
    dissimilarity_from_target,
)


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


def two_relevant_dimensions(n, seed):
    """20 features of which the first 2 decide the dissimilarity."""
    X = np.random.default_rng(seed).uniform(-1, 1, size=(n, 20))
    return X, dissimilarity_from_embedding(X[:, :2])


def test_distances_follow_the_truth_and_importances_find_the_relevant_features():
    X, D = two_relevant_dimensions(300, 0)
    model = SMERF(50, max_features=0.5, min_samples_leaf=3, random_state=0).fit(X, D)
    assert set(np.argsort(model.feature_importances_)[-2:]) == {0, 1}
    assert model.feature_importances_.sum() == pytest.approx(1)
    new, truth = two_relevant_dimensions(100, 1)
    predicted = model.predict(new)
    assert predicted.shape == (100, 100) and np.allclose(predicted, predicted.T)
    upper = np.triu_indices(100, 1)
    assert spearmanr(predicted[upper], truth[upper]).statistic > 0.8
    across = model.predict(new[:10], new[10:30])
    assert np.allclose(across, predicted[:10, 10:30])


def test_oracle_answers_new_items_from_features_alone():
    X, D = two_relevant_dimensions(300, 2)
    model = SMERF(50, max_features=0.5, min_samples_leaf=3, random_state=0).fit(X, D)
    new, _ = two_relevant_dimensions(80, 3)
    queries = random_queries(80, 2000, random_state=0)
    truth = FeatureOracle(new[:, :2]).answer(queries)
    answered = SMERFOracle(model, new).answer(queries)
    assert np.mean((answered == truth).all(axis=1)) > 0.85


def test_oblique_candidates_and_subsampling_work_too():
    X, D = two_relevant_dimensions(200, 4)
    model = SMERF(20, n_oblique=3, bootstrap=False, max_samples=0.7, random_state=0).fit(X, D)
    new, truth = two_relevant_dimensions(60, 5)
    upper = np.triu_indices(60, 1)
    assert spearmanr(model.predict(new)[upper], truth[upper]).statistic > 0.6
    again = SMERF(20, n_oblique=3, bootstrap=False, max_samples=0.7, random_state=0).fit(X, D)
    assert np.array_equal(again.predict(new), model.predict(new))


@pytest.mark.parametrize(
    ("D", "message"),
    [
        (np.ones((5, 4)), "square"),
        (np.ones((6, 6)), "one row per item"),
        (np.where(np.eye(5) > 0, 0, np.nan), "NaN"),
        (np.triu(np.ones((5, 5))), "symmetric"),
        (-np.ones((5, 5)), "non-negative"),
    ],
)
def test_bad_dissimilarities_are_refused_with_a_reason(D, message):
    with pytest.raises(ValueError, match=message):
        SMERF(2).fit(np.zeros((5, 3)), D)


def test_bad_shapes_and_parameters_are_refused():
    X, D = two_relevant_dimensions(30, 6)
    model = SMERF(2, random_state=0).fit(X, D)
    with pytest.raises(ValueError, match=r"shape \(n, 20\)"):
        model.predict(X[:, :5])
    with pytest.raises(NotFittedError):
        SMERF().predict(X)
    for params, name in (
        ({"n_estimators": 0}, "n_estimators"),
        ({"max_features": "all"}, "max_features"),
    ):
        with pytest.raises(ValueError, match=name):
            SMERF(**params).fit(X, D)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        dissimilarity_from_adjacency(2 * np.eye(3))
    assert dissimilarity_from_adjacency(np.eye(3)).tolist() == [[0, 1, 1], [1, 0, 1], [1, 1, 0]]
    assert dissimilarity_from_labels([0, 1, 1]).tolist() == [[0, 1, 1], [1, 0, 0], [1, 0, 0]]
    assert dissimilarity_from_target([0.0, 2.0])[0, 1] == 2.0


def test_constant_features_do_not_use_up_max_features():
    """As scikit-learn: a node draws features until it has max_features that vary in it."""
    rng = np.random.default_rng(0)
    X = np.zeros((200, 10))
    X[:, 3] = rng.normal(size=200)
    D = dissimilarity_from_labels(X[:, 3] > 0)
    model = SMERF(5, max_features=1, random_state=0).fit(X, D)
    assert all(len(tree[0]) == 3 for tree in model.trees_)  # one split, two leaves
    assert model.feature_importances_[3] == 1.0


def test_importances_add_up_to_the_trees_impurity_decrease_also_with_oblique_splits():
    """Axis-aligned splits credit their one feature in full, oblique ones share the
    credit, so a tree's raw importances add up to Dbar(root) minus the leaves' Dbar
    weighted by their share of the items, whatever kinds of split it chose."""
    from app.learn.smerf import _grow, check_dissimilarity

    X, D = two_relevant_dimensions(120, 7)
    sample = np.arange(120)
    # D as SMERF.fit hands it to the kernel (one type, compiled once by the warm-up)
    grown = _grow(X, check_dissimilarity(D), sample, 4, 3, 2, 3, -1, 0)
    features, leaf_start, leaf_members, importance = grown[0], grown[6], grown[7], grown[8]
    internal = grown[3] != -1
    assert (features[internal, 1] >= 0).any() and (features[internal, 1] < 0).any()
    leaves_dbar = sum(
        D[np.ix_(members, members)].mean() * len(members) / 120
        for members in np.split(leaf_members, leaf_start[1:-1])
    )
    assert importance.sum() == pytest.approx(D.mean() - leaves_dbar)
