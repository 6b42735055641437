"""An even vote is not a label: predictions whose top classes tie say so (no label, the
tied classes listed), whichever class would sort first (issue 16)."""

from __future__ import annotations

import numpy as np

from app.learn import TripletBoost
from app.predictions.service import _rows
from app.training.fitted import Fitted, ItemPredictions


def test_a_tie_is_no_label_and_names_the_tied_classes():
    classes = np.array(["apple", "pear", "plum"])
    proba = np.array([[0.4, 0.4, 0.2], [0.2, 0.5, 0.3], [np.nan, np.nan, np.nan], [1 / 3] * 3])
    found = ItemPredictions.deciding(classes, proba, np.array([5, 5, 0, 3]))
    assert list(found.labels) == [None, "pear", None, None]
    assert found.tied(0) == ["apple", "pear"]
    assert found.tied(1) is None and found.tied(2) is None
    assert found.tied(3) == ["apple", "pear", "plum"]
    rows = _rows(["a", "b", "c", "d"], found, np.arange(4), known=True)
    assert rows[0]["label"] is None and rows[0]["tied"] == ["apple", "pear"]
    assert rows[0]["probabilities"] == {"apple": 0.4, "pear": 0.4, "plum": 0.2}
    assert rows[1]["label"] == "pear" and rows[1]["tied"] is None
    assert rows[2]["label"] is None and rows[2]["tied"] is None and rows[2]["probabilities"] is None


def test_k_nearest_neighbours_split_evenly_give_no_label():
    fitted = Fitted(
        kind="tete",
        item_ids=np.arange(4),
        keys=["x", "y", "z", "w"],
        train_positions=np.array([0, 1, 2]),
        train_labels=np.array(["b-class", "a-class", "b-class"]),
        k_neighbors=2,
    )
    found = fitted.labels_from_distances(np.array([[1.0, 1.0, 5.0], [1.0, 3.0, 2.0]]))
    assert list(found.labels) == [None, "b-class"]
    assert found.tied(0) == ["a-class", "b-class"]


def test_tripletboost_reports_an_even_vote_as_no_label(monkeypatch):
    rng = np.random.default_rng(0)
    triplets = np.array(
        [(a, b, c) for a, b, c in rng.integers(0, 6, (400, 3)) if len({a, b, c}) == 3]
    )
    model = TripletBoost(n_iter=50, random_state=0).fit(
        triplets, np.array([0, 1, 2, 3]), np.array(["a", "a", "b", "b"])
    )
    monkeypatch.setattr(
        model,
        "_scores",
        lambda triplets, items: (np.array([[0.7, 0.7], [0.9, 0.2]]), np.array([4, 4])),
    )
    assert list(model.predict(triplets, np.array([4, 5]))) == [None, "a"]
