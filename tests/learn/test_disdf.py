"""DisDF: the weight objective and its Frank–Wolfe solver, the cascade as a classifier
and as a metric, and scikit-learn's estimator checks."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.model_selection import train_test_split

from app.learn.disdf import DisDF, frank_wolfe, gradient, objective, pair_terms


@pytest.fixture(scope="module")
def terms():
    rng = np.random.default_rng(0)
    probabilities = rng.dirichlet(np.ones(3), size=(20, 40))  # 20 trees, 40 items, 3 classes
    y = rng.integers(0, 3, size=40)
    first, second = np.triu_indices(40, 1)
    P, Q = pair_terms(probabilities, first, second)
    same = y[first] == y[second]
    return P[same], Q[~same]


def test_gradient_is_the_derivative_of_the_objective(terms):
    P_same, Q_diff = terms
    w = np.random.default_rng(1).dirichlet(np.ones(20))
    numeric = np.array(
        [
            (
                objective(w + step, P_same, Q_diff, 1.2, 0.1)
                - objective(w - step, P_same, Q_diff, 1.2, 0.1)
            )
            / 2e-6
            for step in 1e-6 * np.eye(20)
        ]
    )
    assert np.allclose(gradient(w, P_same, Q_diff, 1.2, 0.1), numeric, rtol=1e-5, atol=1e-7)


def test_frank_wolfe_lowers_the_objective_and_favours_informative_trees(terms):
    P_same, Q_diff = terms
    uniform = np.full(20, 1 / 20)
    w = frank_wolfe(P_same, Q_diff, 1.2, 0.01, 200)
    assert w.min() >= 0 and w.sum() == pytest.approx(1)
    assert objective(w, P_same, Q_diff, 1.2, 0.01) < objective(uniform, P_same, Q_diff, 1.2, 0.01)

    # Ten trees that see the classes and ten that guess: the weights go to the first ten.
    rng = np.random.default_rng(2)
    y = rng.integers(0, 3, size=60)
    informed = 0.2 * rng.dirichlet(np.ones(3), size=(10, 60)) + 0.8 * np.eye(3)[y]
    guessing = rng.dirichlet(np.ones(3), size=(10, 60))
    first, second = np.triu_indices(60, 1)
    P, Q = pair_terms(np.concatenate([informed, guessing]), first, second)
    same = y[first] == y[second]
    w = frank_wolfe(P[same], Q[~same], 1.0, 0.01, 200)
    assert w[:10].sum() > 0.8
    assert objective(w, P[same], Q[~same], 1.0, 0.01) < 0.5 * objective(
        uniform, P[same], Q[~same], 1.0, 0.01
    )


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    train, test = train_test_split(np.arange(len(y)), train_size=100, stratify=y, random_state=0)
    return X, y, train, test


def test_classifies_from_a_small_training_set_and_learns_a_metric(cancer):
    X, y, train, test = cancer
    model = DisDF(n_estimators=30, max_levels=3, random_state=0).fit(X[train], y[train])
    assert np.mean(model.predict(X[test]) == y[test]) >= 0.9
    assert 1 <= model.n_levels_ <= 3 and len(model.level_accuracy_) == model.n_levels_
    assert np.allclose(model.predict_proba(X[test]).sum(axis=1), 1)
    distances = model.pairwise_distances(X[test][:100])
    same = y[test][:100, None] == y[test][None, :100]
    off_diagonal = ~np.eye(100, dtype=bool)
    assert distances[same & off_diagonal].mean() < 0.5 * distances[~same].mean()
    _, neighbours = model.kneighbors(X[test][:50], X[train], n_neighbors=5)
    agree = y[train][neighbours] == y[test][:50, None]
    assert agree.mean() >= 0.85
    answered = model.oracle(X[test]).answer(np.array([[0, 1, 2], [3, 4, 5]]))
    assert answered.shape == (2, 3)


def test_weights_off_is_the_plain_gcforest(cancer):
    X, y, train, _ = cancer
    plain = DisDF(n_estimators=10, max_levels=2, weighted=False, random_state=0).fit(
        X[train], y[train]
    )
    for fold in plain.weights_[0]:
        for w in fold:
            assert np.allclose(w, 1 / 10)
    weighted = DisDF(n_estimators=10, max_levels=2, random_state=0).fit(X[train], y[train])
    assert any(not np.allclose(w, 1 / 10) for fold in weighted.weights_[0] for w in fold)


def test_many_classes_and_string_labels():
    X, y = load_wine(return_X_y=True)
    names = np.array(["barolo", "grignolino", "barbera"])[y]
    model = DisDF(n_estimators=20, max_levels=2, random_state=0).fit(X[::2], names[::2])
    assert set(model.predict(X[1::2])) <= set(names)
    assert np.mean(model.predict(X[1::2]) == names[1::2]) >= 0.85


def test_bad_parameters_are_refused(cancer):
    X, y, train, _ = cancer
    for params, name in (
        ({"n_folds": 1}, "n_folds"),
        ({"tau": -1}, "tau"),
        ({"n_estimators": 0}, "n_estimators"),
    ):
        with pytest.raises(ValueError, match=name):
            DisDF(**params).fit(X[train], y[train])
    with pytest.raises(ValueError, match="2 classes"):
        DisDF().fit(X[:10], np.zeros(10))
