"""Feature oracles, the canonical triplet format, random triplets and the triplet error."""

import numpy as np
import pytest

from app.learn import FeatureOracle, check_triplets, random_triplets, triplet_error
from app.learn.triplets import random_queries

X = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 0.0], [0.0, 2.0]])


class TestFeatureOracle:
    def test_answers_by_euclidean_distance(self):
        oracle = FeatureOracle(X)
        answers = oracle.answer([[0, 2, 1], [0, 1, 2], [1, 3, 2]])
        assert answers.tolist() == [[0, 1, 2], [0, 1, 2], [1, 3, 2]]
        assert oracle.n_answered_ == 3

    def test_metrics_disagree_where_they_should(self):
        points = np.array([[0.0, 0.0], [3.0, 3.0], [0.0, 4.5], [10.0, 10.0]])
        # cityblock: |3|+|3| = 6 > 4.5, euclidean: 4.24 < 4.5
        assert FeatureOracle(points).answer([[0, 1, 2]])[0, 1] == 1
        assert FeatureOracle(points, metric="cityblock").answer([[0, 1, 2]])[0, 1] == 2
        # cosine: item 3 points the same way as item 1, whatever its length
        assert FeatureOracle(points + 1, metric="cosine").answer([[1, 3, 2]])[0, 1] == 3

    def test_precomputed_dissimilarity(self):
        D = np.array([[0, 9, 1], [9, 0, 5], [1, 5, 0]], dtype=float)
        assert FeatureOracle(D, metric="precomputed").answer([[0, 1, 2]]).tolist() == [[0, 2, 1]]

    def test_noise_flips_the_given_share_reproducibly(self):
        rng = np.random.default_rng(0)
        features = rng.normal(size=(200, 3))
        queries = random_queries(200, 20_000, random_state=1)
        clean = FeatureOracle(features).answer(queries)
        noisy = FeatureOracle(features, noise=0.2, random_state=5).answer(queries)
        flipped = np.mean(noisy[:, 1] != clean[:, 1])
        assert 0.19 < flipped < 0.21
        again = FeatureOracle(features, noise=0.2, random_state=5).answer(queries)
        assert np.array_equal(noisy, again)

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"metric": "manhattan"}, "metric must be one of"),
            ({"noise": 1.5}, "noise must be a probability"),
            ({"X": [[np.nan, 1.0], [0.0, 1.0]]}, "NaN"),
            ({"X": np.ones((3, 2)), "metric": "precomputed"}, "must be square"),
            ({"X": np.zeros((2, 2)), "metric": "cosine"}, "non-zero"),
        ],
    )
    def test_bad_arguments_say_which(self, kwargs, message):
        kwargs = {"X": X, **kwargs}
        with pytest.raises(ValueError, match=message):
            FeatureOracle(kwargs.pop("X"), **kwargs)

    @pytest.mark.parametrize(
        ("queries", "message"),
        [
            ([[0, 1]], r"shape \(m, 3\)"),
            ([[0.5, 1, 2]], "integer item ids"),
            ([[0, 1, 9]], "names item 9, but there are only 4 items"),
            ([[0, 1, 1]], "repeats an item"),
            ([[-1, 1, 2]], "negative item id"),
        ],
    )
    def test_bad_queries_say_what_is_wrong(self, queries, message):
        with pytest.raises(ValueError, match=message):
            FeatureOracle(X).answer(queries)


def test_check_triplets_accepts_integral_floats_and_empty():
    assert check_triplets(np.array([[0.0, 1.0, 2.0]])).dtype == np.int64
    assert check_triplets([]).shape == (0, 3)


def test_random_triplets_are_distinct_items_and_reproducible():
    oracle = FeatureOracle(np.random.default_rng(0).normal(size=(50, 2)))
    first = random_triplets(50, 5000, oracle, random_state=3)
    assert first.shape == (5000, 3)
    check_triplets(first, 50)
    assert np.array_equal(first, random_triplets(50, 5000, oracle, random_state=3))
    assert len(np.unique(first[:, 0])) == 50


def test_triplet_error_of_the_true_and_a_reversed_embedding():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(40, 2))
    triplets = random_triplets(40, 2000, FeatureOracle(Y), random_state=0)
    assert triplet_error(Y, triplets) == 0.0
    assert triplet_error(Y, triplets[:, [0, 2, 1]]) == 1.0
