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

    def test_human_like_noise_errs_on_near_ties_at_the_asked_rate(self):
        rng = np.random.default_rng(0)
        features = rng.normal(size=(300, 2))
        queries = random_queries(300, 30_000, random_state=2)
        truth = FeatureOracle(features)
        scale = truth.scale_for_error(0.1)
        human = FeatureOracle(features, noise_scale=scale, random_state=3).answer(queries)
        wrong = human[:, 1] != truth.answer(queries)[:, 1]
        assert 0.09 < wrong.mean() < 0.11
        anchor, p, q = queries.T
        margin = np.abs(truth.distance(anchor, p) - truth.distance(anchor, q))
        near, clear = margin < np.quantile(margin, 0.25), margin > np.quantile(margin, 0.75)
        # People err on the close calls, hardly ever on the clear ones; uniform flips
        # err on both alike.
        assert wrong[near].mean() > 0.25 and wrong[clear].mean() < 0.01
        uniform = FeatureOracle(features, noise=0.1, random_state=3).answer(queries)
        flips = uniform[:, 1] != truth.answer(queries)[:, 1]
        assert abs(flips[near].mean() - flips[clear].mean()) < 0.02
        again = FeatureOracle(features, noise_scale=scale, random_state=3).answer(queries)
        assert np.array_equal(human, again)

    def test_the_scale_can_be_set_on_the_questions_asked(self):
        """Near neighbours against farther items are easier than random questions: a
        scale set on random ones errs less on them; set on them, at the asked rate."""
        from app.learn.tete import feature_triplets

        rng = np.random.default_rng(1)
        features = rng.normal(size=(300, 2))
        questions, _ = feature_triplets(features, n_inliers=10, n_outliers=10, gamma=0)
        truth = FeatureOracle(features)
        for scale, expected in (
            (truth.scale_for_error(0.1), (0.0, 0.07)),
            (truth.scale_for_error(0.1, queries=questions), (0.09, 0.11)),
        ):
            human = FeatureOracle(features, noise_scale=scale, random_state=3).answer(questions)
            wrong = np.mean(human[:, 1] != truth.answer(questions)[:, 1])
            assert expected[0] < wrong < expected[1], (scale, wrong)
        with pytest.raises(ValueError, match="queries is empty"):
            truth.scale_for_error(0.1, queries=np.empty((0, 3), np.int64))

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"noise_scale": -1.0}, "noise_scale must be a distance"),
            ({"noise_scale": np.inf}, "noise_scale must be a distance"),
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


def test_the_simulated_crowd_errs_like_people_when_asked():
    """`closer simulate --noise-model human`: as many wrong answers as --noise says, but
    on the near ties; attention checks (the anchor among the candidates) answered right."""
    from app.simulate import _Items

    rng = np.random.default_rng(4)
    points = rng.normal(size=(120, 2))
    exported = [{"key": f"k{i}", "features": list(point)} for i, point in enumerate(points)]
    crowd = _Items(exported, noise=0.2, seed=1, noise_model="human")
    truth = FeatureOracle(points)
    queries = random_queries(120, 6000, random_state=5)

    def shown(a, p, q):
        return {
            role: {"key": f"k{i}"}
            for role, i in zip(("anchor", "left", "right"), (a, p, q), strict=True)
        }

    chosen = np.array([crowd.choose(shown(*query))["choice"] == "left" for query in queries])
    right = truth.answer(queries)[:, 1] == queries[:, 1]
    wrong = chosen != right
    assert 0.17 < wrong.mean() < 0.23
    anchor, p, q = queries.T
    margin = np.abs(truth.distance(anchor, p) - truth.distance(anchor, q))
    assert wrong[margin < np.quantile(margin, 0.25)].mean() > 3 * wrong.mean() / 2
    assert all(crowd.choose(shown(0, 0, i)) == {"choice": "left"} for i in range(1, 40))


def test_screens_are_answered_by_the_nearest_items_without_noise():
    X = np.array([[0.0], [1.0], [2.5], [4.0], [10.0], [10.5]])
    oracle = FeatureOracle(X)
    assert oracle.rank(0, [4, 3, 1, 2], 2).tolist() == [1, 2]
    assert oracle.rank(5, [0, 1, 4], 1).tolist() == [4]
    assert oracle.odd_one_out([4, 0, 5]) == 0  # 4 and 5 go together
    assert oracle.odd_one_out([1, 0, 4]) == 4
    with pytest.raises(ValueError, match="picks must be"):
        oracle.rank(0, [1, 2], 2)


def test_each_decision_on_a_screen_takes_the_triplets_human_like_noise():
    """A rank screen of two items is a triplet: its first pick is right as often as the
    oracle's triplet answer; an odd-one-out is decided by its nearest pair, with the
    softmax of the pairs' distances."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 3))
    oracle = FeatureOracle(X, noise_scale=0.4, random_state=0)
    queries = rng.integers(0, 40, (4000, 3))
    queries = queries[(queries[:, 0] != queries[:, 1]) & (queries[:, 0] != queries[:, 2])]
    queries = queries[queries[:, 1] != queries[:, 2]]
    truth = FeatureOracle(X)
    right = truth.answer(queries)[:, 1]
    by_rank = np.array([oracle.rank(a, [p, q], 1)[0] for a, p, q in queries])
    by_triplet = FeatureOracle(X, noise_scale=0.4, random_state=1).answer(queries)[:, 1]
    assert abs(np.mean(by_rank == right) - np.mean(by_triplet == right)) < 0.03
    assert 0.6 < np.mean(by_rank == right) < 0.95  # noisy, and mostly right
    odd = np.array([oracle.odd_one_out(row) for row in queries])
    exact = np.array([truth.odd_one_out(row) for row in queries])
    assert 0.5 < np.mean(odd == exact) < 0.95
    lapses = FeatureOracle(X, noise=1.0, random_state=0)
    firsts = np.array([lapses.rank(0, [1, 2, 3, 4], 1)[0] for _ in range(2000)])
    assert set(np.unique(firsts)) == {1, 2, 3, 4}  # a lapse picks at random
