"""CompRF on planted data: accuracy, query counts, noise, and an exactly resumable build."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_diabetes, make_blobs
from sklearn.exceptions import NotFittedError

from app.learn import CompRF, CompRFBuilder, FeatureOracle, random_triplets
from app.learn.keys import query_keys
from tests.support.saved_states import with_array


class RecordingOracle(FeatureOracle):
    """A feature oracle that remembers every query it was asked."""

    def __init__(self, X, **kwargs):
        super().__init__(X, **kwargs)
        self.asked = []

    def answer(self, queries):
        queries = np.asarray(queries)
        self.asked.append(queries.copy())
        return super().answer(queries)

    def all_asked(self):
        return np.concatenate(self.asked) if self.asked else np.empty((0, 3), int)


def unordered_keys(queries):
    return {(a, min(p, q), max(p, q)) for a, p, q in np.asarray(queries).tolist()}


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=600, centers=4, cluster_std=0.6, random_state=0)
    return X, np.array(["north", "south", "east", "west"])[y]


def canonical_trees(model):
    """Each tree in preorder: pivots of internal nodes, sorted member ids of leaves.

    Node ids depend on the order nodes completed in; the trees themselves must not."""
    nodes, trees = model.nodes_, []
    for root in model.roots_:
        tree, stack = [], [root]
        while stack:
            node = stack.pop()
            if nodes["left"][node] >= 0:
                tree.append(("split", nodes["pivot_left"][node], nodes["pivot_right"][node]))
                stack += [nodes["right"][node], nodes["left"][node]]
            else:
                members = model.members_[nodes["start"][node] : nodes["end"][node]]
                tree.append(("leaf", tuple(sorted(model.items_[members].tolist()))))
        trees.append(tree)
    return trees


def split(n, test_share=0.25, seed=0):
    order = np.random.default_rng(seed).permutation(n)
    cut = int(n * (1 - test_share))
    return order[:cut], order[cut:]


class TestAccuracy:
    def test_perfect_oracle_on_separated_clusters(self, blobs):
        X, y = blobs
        train, test = split(len(X))
        model = CompRF(n_trees=20, random_state=0).fit(train, y[train], FeatureOracle(X))
        assert np.mean(model.predict(test, FeatureOracle(X)) == y[test]) >= 0.99
        proba = model.predict_proba(test, FeatureOracle(X))
        assert proba.shape == (len(test), 4) and np.allclose(proba.sum(axis=1), 1)
        assert set(model.classes_) == {"north", "south", "east", "west"}

    def test_noise_degrades_gracefully_and_redundancy_helps(self):
        X, y = make_blobs(n_samples=800, centers=3, cluster_std=1.5, random_state=1)
        train, test = split(len(X))
        accuracy = {}
        for noise, k in ((0.0, 1), (0.2, 1), (0.2, 3)):
            oracle = FeatureOracle(X, noise=noise, random_state=2)
            model = CompRF(n_trees=30, answers_per_query=k, random_state=0)
            model.fit(train, y[train], oracle)
            accuracy[noise, k] = np.mean(model.predict(test, oracle) == y[test])
        assert accuracy[0.0, 1] >= 0.9
        # graceful: 20% wrong answers cost a few points, far from chance (0.33)
        assert accuracy[0.2, 1] >= accuracy[0.0, 1] - 0.1, accuracy
        assert accuracy[0.2, 3] >= accuracy[0.2, 1] - 0.01, accuracy

    def test_regression_beats_predicting_the_mean(self):
        X, y = load_diabetes(return_X_y=True)
        train, test = split(len(X))
        oracle = FeatureOracle(X)
        model = CompRF(n_trees=50, leaf_size=5, task="regression", random_state=0)
        predicted = model.fit(train, y[train], oracle).predict(test, oracle)
        rmse = np.sqrt(np.mean((predicted - y[test]) ** 2))
        baseline = np.sqrt(np.mean((y[train].mean() - y[test]) ** 2))
        assert rmse < 0.85 * baseline


class TestQueries:
    def test_one_tree_asks_about_n_log2_n_over_leaf_size(self):
        X = np.random.default_rng(0).normal(size=(2048, 5))
        y = np.zeros(2048, int)
        for leaf_size in (1, 8):
            model = CompRF(n_trees=1, leaf_size=leaf_size, supervised=False, random_state=0)
            model.fit(np.arange(2048), y, FeatureOracle(X))
            expected = 2048 * np.log2(2048 / leaf_size)
            assert 0.8 * expected < model.n_queries_ < 1.6 * expected, (leaf_size, model.n_queries_)

    def test_never_asks_a_query_twice_and_counts_what_it_asked(self, blobs):
        X, y = blobs
        oracle = RecordingOracle(X)
        model = CompRF(n_trees=25, random_state=3).fit(np.arange(400), y[:400], oracle)
        asked = oracle.all_asked()
        assert len(unordered_keys(asked)) == len(asked) == model.n_queries_

    def test_answers_already_held_are_reused(self, blobs):
        X, y = blobs
        items = np.arange(300)
        passive = random_triplets(len(X), 20_000, FeatureOracle(X), random_state=0)
        build = CompRFBuilder(items, y[items], n_trees=10, random_state=1)
        build.add_answers(passive)
        oracle = RecordingOracle(X)
        while not build.is_complete:
            build.add_answers(oracle.answer(build.pending_queries()))
        asked = unordered_keys(oracle.all_asked())
        assert not asked & unordered_keys(passive)
        fresh = CompRF(n_trees=10, random_state=1).fit(items, y[items], FeatureOracle(X))
        assert len(asked) < fresh.n_queries_
        assert canonical_trees(build.forest()) == canonical_trees(fresh)

    def test_routing_training_items_reuses_the_build_answers(self, blobs):
        X, y = blobs
        model = CompRF(n_trees=10, random_state=0).fit(np.arange(200), y[:200], FeatureOracle(X))
        oracle = RecordingOracle(X)
        assert np.array_equal(model.predict(np.arange(200), oracle), y[:200])
        assert oracle.all_asked().shape[0] == 0

    def test_k_answers_per_query_and_one_more_on_a_tie(self, blobs):
        X, y = blobs
        build = CompRFBuilder(np.arange(50), y[:50], n_trees=2, answers_per_query=2, random_state=0)
        queries, needed = build.pending_queries(return_needed=True)
        assert np.all(needed == 2)
        query = queries[:1]
        first = FeatureOracle(X).answer(query)
        build.add_answers(np.concatenate([first, first[:, [0, 2, 1]]]))  # one vote each way
        queries, needed = build.pending_queries(return_needed=True)
        row = np.flatnonzero((queries == query).all(axis=1))
        assert needed[row].tolist() == [1]


class TestResumableBuild:
    def fit_by_builder(self, X, y, items, seed, batches_seed, save_midway=False):
        oracle = FeatureOracle(X)
        build = CompRFBuilder(items, y[items], n_trees=8, random_state=seed)
        rng = np.random.default_rng(batches_seed)
        round_number = 0
        while not build.is_complete:
            answers = oracle.answer(build.pending_queries())
            rng.shuffle(answers)
            for batch in np.array_split(answers, rng.integers(1, 6)):
                build.add_answers(batch)
            round_number += 1
            if save_midway and round_number == 3:
                build = CompRFBuilder.from_bytes(build.to_bytes())
        return build.forest()

    def test_shuffled_batched_answers_give_the_same_forest_as_fit(self, blobs):
        X, y = blobs
        items = np.arange(0, 600, 2)
        direct = CompRF(n_trees=8, random_state=4).fit(items, y[items], FeatureOracle(X))
        for batches_seed, save in ((0, False), (1, True)):
            rebuilt = self.fit_by_builder(X, y, items, 4, batches_seed, save_midway=save)
            assert canonical_trees(rebuilt) == canonical_trees(direct)
            test = np.arange(1, 600, 2)
            assert np.array_equal(
                direct.predict(test, FeatureOracle(X)), rebuilt.predict(test, FeatureOracle(X))
            )

    def test_progress_reports_per_tree(self, blobs):
        X, y = blobs
        build = CompRFBuilder(np.arange(100), y[:100], n_trees=3, random_state=0)
        start = build.progress()
        assert start["done_share"] == 0 and start["queries_pending"] == 3 * 98
        while not build.is_complete:
            build.add_answers(FeatureOracle(X).answer(build.pending_queries()))
        assert build.progress()["tree_done_share"] == [1.0, 1.0, 1.0]

    @pytest.mark.parametrize(
        ("n", "leaf_size", "answers_per_query"), [(250, 5, 1), (400, 1, 1), (250, 5, 3)]
    )
    def test_the_answers_still_needed_are_estimated_honestly(self, n, leaf_size, answers_per_query):
        """The estimate a researcher (and the demo) reads: within 10% of what the build
        then takes at its start, within 20% half-way (small nodes split less evenly than
        the model assumes), with noisy answers."""
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        build = CompRFBuilder(
            np.arange(n),
            y[:n],
            n_trees=5,
            leaf_size=leaf_size,
            answers_per_query=answers_per_query,
            random_state=0,
        )
        oracle = FeatureOracle(X[:n], noise=0.1, random_state=0)
        estimates, used = [], 0
        while not build.is_complete:
            estimates.append((used, build.progress()["answers_needed_estimate"]))
            queries, needed = build.pending_queries(return_needed=True)
            asked = np.repeat(queries, needed, axis=0)
            used += len(asked)
            build.add_answers(oracle.answer(asked))
        assert build.progress()["answers_needed_estimate"] == 0
        halfway = next(estimate for estimate in estimates if estimate[0] >= used / 2)
        assert estimates[0][1] == pytest.approx(used, rel=0.1)
        assert halfway[1] == pytest.approx(used - halfway[0], rel=0.2)

    def test_what_answers_changed_is_read_from_the_keys_they_were_about(self, blobs):
        """Between splits, pending_about(keys) tells what answers about `keys` changed:
        each query the open nodes ask with one of those keys, once, with the answers it
        still needs; the same as the whole pending list says about them."""
        X, y = blobs
        items = np.arange(0, 300, 3)
        build = CompRFBuilder(items, y[items], n_trees=4, answers_per_query=3, random_state=0)
        rng = np.random.default_rng(0)
        answers = FeatureOracle(X).answer(build.pending_queries())
        build.add_answers(answers[rng.choice(len(answers), len(answers) // 2, replace=False)])
        asked, needed = build.pending_queries(return_needed=True)
        keys = query_keys(*asked.T)
        about = np.concatenate([keys[rng.choice(len(keys), 40, replace=False)], [12345]])
        queries, still = build.pending_about(np.sort(about))
        got = dict(zip(query_keys(*queries.T).tolist(), still.tolist(), strict=True))
        expected = dict(zip(keys.tolist(), needed.tolist(), strict=True))
        assert got == {key: expected[key] for key in about.tolist() if key in expected}

    def test_answers_a_few_at_a_time_leave_the_build_as_a_fresh_load_of_it(self, blobs):
        """A build fed noisy answers (ties, votes against, queries no node asks) a few at
        a time, between splits and across them, waits for the same queries and builds the
        same forest as the same build loaded afresh after each batch."""
        X, y = blobs
        items = np.arange(0, 240, 2)
        build = CompRFBuilder(items, y[items], n_trees=3, answers_per_query=3, random_state=1)
        oracle = FeatureOracle(X, noise=0.3, random_state=0)
        rng = np.random.default_rng(0)
        compared = 0
        while not build.is_complete:
            queries, needed = build.pending_queries(return_needed=True)
            asked = np.repeat(queries, needed, axis=0)
            asked = asked[rng.permutation(len(asked))[: max(1, len(asked) // 2)]]
            stray = rng.choice(items, size=(3, 3))
            stray = stray[(stray[:, 0] != stray[:, 1]) & (stray[:, 1] != stray[:, 2])]
            stray = stray[stray[:, 0] != stray[:, 2]]
            answers = np.concatenate([oracle.answer(asked), stray])
            for batch in np.array_split(answers, max(1, len(answers) // 7)):
                build.add_answers(batch)
                fresh = CompRFBuilder.from_bytes(build.to_bytes())
                for mine, theirs in zip(
                    build.pending_queries(return_needed=True),
                    fresh.pending_queries(return_needed=True),
                    strict=True,
                ):
                    assert np.array_equal(mine, theirs)
                compared += 1
        assert compared > 50
        assert canonical_trees(build.forest()) == canonical_trees(
            CompRFBuilder.from_bytes(build.to_bytes()).forest()
        )

    def test_the_same_build_saves_the_same_bytes_and_loads_back(self, blobs):
        X, y = blobs
        items = np.arange(0, 300, 3)
        build = CompRFBuilder(items, y[items], n_trees=4, answers_per_query=2, random_state=0)
        build.add_answers(FeatureOracle(X).answer(build.pending_queries()))
        state = build.to_bytes()
        assert build.to_bytes() == state
        again = CompRFBuilder.from_bytes(state)
        assert np.array_equal(again.pending_queries(), build.pending_queries())
        assert CompRFBuilder.from_untrusted_bytes(state, max_bytes=10**7).n_queries == len(
            build.store
        )

    def test_an_incomplete_build_is_not_a_forest(self, blobs):
        X, y = blobs
        with pytest.raises(ValueError, match="not complete"):
            CompRFBuilder(np.arange(20), y[:20], n_trees=1).forest()

    def test_routing_resumes_in_any_order(self, blobs):
        X, y = blobs
        model = CompRF(n_trees=6, random_state=0).fit(np.arange(300), y[:300], FeatureOracle(X))
        new_items = np.arange(300, 360)
        router = model.route(new_items)
        rng = np.random.default_rng(0)
        while not router.is_complete:
            answers = FeatureOracle(X).answer(router.pending_queries())
            rng.shuffle(answers)
            for batch in np.array_split(answers, 3):
                router.add_answers(batch)
        expected = model.predict(new_items, FeatureOracle(X))
        assert np.array_equal(model.predict_from_leaves(router.leaves()), expected)


class TestEstimatorHabits:
    def test_same_seed_same_forest_other_seed_other_forest(self, blobs):
        X, y = blobs

        def fit(seed):
            return CompRF(n_trees=5, random_state=seed).fit(
                np.arange(200), y[:200], FeatureOracle(X)
            )

        first, second, other = fit(7), fit(7), fit(8)
        assert np.array_equal(first.nodes_["pivot_left"], second.nodes_["pivot_left"])
        assert first.n_queries_ == second.n_queries_
        assert not np.array_equal(first.nodes_["pivot_left"][:5], other.nodes_["pivot_left"][:5])

    def test_clone_and_not_fitted(self, blobs):
        X, _ = blobs
        model = CompRF(n_trees=3, leaf_size=2, random_state=1)
        copy = clone(model)
        assert copy.get_params() == model.get_params()
        with pytest.raises(NotFittedError):
            copy.predict(np.arange(3), FeatureOracle(X))

    @pytest.mark.parametrize(
        ("params", "name"),
        [
            ({"n_trees": 0}, "n_trees"),
            ({"leaf_size": 0}, "leaf_size"),
            ({"subsample": 0.0}, "subsample"),
            ({"subsample": 1.5}, "subsample"),
            ({"task": "ranking"}, "task"),
            ({"supervised": "yes"}, "supervised"),
            ({"answers_per_query": 0}, "answers_per_query"),
        ],
    )
    def test_bad_parameters_are_named(self, blobs, params, name):
        X, y = blobs
        with pytest.raises(ValueError, match=name):
            CompRF(**params).fit(np.arange(10), y[:10], FeatureOracle(X))

    @pytest.mark.parametrize(
        ("items", "labels", "message"),
        [
            ([0, 1, 1], ["a", "b", "c"], "must not repeat"),
            ([0, 1, 2], ["a", "b"], "one label per item"),
            ([0], ["a"], "at least 2"),
            ([[0, 1]], ["a"], "1-d array"),
        ],
    )
    def test_bad_training_data_is_explained(self, blobs, items, labels, message):
        X, _ = blobs
        with pytest.raises(ValueError, match=message):
            CompRF().fit(items, labels, FeatureOracle(X))


def test_the_answers_held_come_back_as_triplets(blobs):
    X, y = blobs
    oracle = RecordingOracle(X)
    model = CompRF(n_trees=3, random_state=0).fit(np.arange(100), y[:100], oracle)
    held = model.store_.triplets()
    assert len(held) == model.n_queries_
    assert unordered_keys(held) == unordered_keys(oracle.all_asked())
    assert np.array_equal(FeatureOracle(X).answer(held), held)  # each is the oracle's answer


class TestEdges:
    def test_answers_held_in_advance_build_the_whole_forest_at_once(self):
        X = np.linspace(0, 1, 40)[:, None]  # items on a line: unbalanced, deep splits
        n = len(X)
        a, p, q = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij")
        distinct = (a != p) & (a != q) & (p < q)
        every_answer = FeatureOracle(X).answer(np.stack([a[distinct], p[distinct], q[distinct]], 1))
        build = CompRFBuilder(np.arange(n), np.arange(n) % 2, n_trees=5, random_state=0)
        build.add_answers(every_answer)
        assert build.is_complete and len(build.pending_queries()) == 0
        direct = CompRF(n_trees=5, random_state=0).fit(
            np.arange(n), np.arange(n) % 2, FeatureOracle(X)
        )
        assert canonical_trees(build.forest()) == canonical_trees(direct)

    def test_leaf_size_at_least_the_items_is_one_leaf_and_no_queries(self, blobs):
        X, y = blobs
        model = CompRF(n_trees=3, leaf_size=50).fit(np.arange(50), y[:50], FeatureOracle(X))
        assert model.n_queries_ == 0
        classes, counts = np.unique(y[:50], return_counts=True)
        majority = classes[np.argmax(counts)]  # ties go to the first class, as in predict
        assert set(model.predict(np.arange(50, 60), FeatureOracle(X))) == {majority}

    def test_two_items_and_a_single_label(self, blobs):
        X, _ = blobs
        model = CompRF(n_trees=2, random_state=0).fit([3, 8], ["a", "a"], FeatureOracle(X))
        assert model.n_queries_ == 0 and list(model.predict([10], FeatureOracle(X))) == ["a"]
        single = CompRF(n_trees=2, random_state=0).fit(np.arange(30), ["a"] * 30, FeatureOracle(X))
        assert single.n_queries_ > 0  # all labels equal: pivots at random, still splits

    def test_a_forest_from_a_resumed_builder_keeps_its_seed(self, blobs):
        X, y = blobs
        build = CompRFBuilder(np.arange(60), y[:60], n_trees=2, random_state=11)
        build = CompRFBuilder.from_bytes(build.to_bytes())
        while not build.is_complete:
            build.add_answers(FeatureOracle(X).answer(build.pending_queries()))
        assert build.forest().get_params()["random_state"] == 11


def test_subsample_builds_each_tree_on_its_own_share_of_items(blobs):
    X, y = blobs
    model = CompRF(n_trees=6, subsample=0.5, random_state=0).fit(
        np.arange(400), y[:400], FeatureOracle(X)
    )
    roots = model.roots_
    sizes = model.nodes_["end"][roots] - model.nodes_["start"][roots]
    assert sizes.tolist() == [200] * 6
    tree_items = [
        set(model.items_[model.members_[model.nodes_["start"][r] : model.nodes_["end"][r]]])
        for r in roots
    ]
    assert len(set.union(*tree_items)) > 300  # different trees draw different halves
    full = CompRF(n_trees=6, random_state=0).fit(np.arange(400), y[:400], FeatureOracle(X))
    assert model.n_queries_ < 0.6 * full.n_queries_


def test_a_restarted_build_replays_a_subset_of_answers_into_the_forest_they_alone_give(blobs):
    X, y = blobs
    honest, liar = FeatureOracle(X), FeatureOracle(X, noise=0.5, random_state=1)
    build = CompRFBuilder(np.arange(60), y[:60], n_trees=3, random_state=4)
    good, bad = [], []
    while not build.is_complete:
        queries = build.pending_queries()
        half = len(queries) // 2
        good.append(honest.answer(queries[:half]))
        bad.append(liar.answer(queries[half:]))
        build.add_answers(np.concatenate([good[-1], bad[-1]]))
    # Leaving the liar's answers out: the restarted build asks for them again, honestly.
    replay = build.restarted()
    assert replay.n_queries == 0 and not replay.is_complete
    replay.add_answers(np.concatenate(good))
    while not replay.is_complete:
        replay.add_answers(honest.answer(replay.pending_queries()))
    direct = CompRF(n_trees=3, random_state=4).fit(np.arange(60), y[:60], honest)
    assert canonical_trees(replay.forest()) == canonical_trees(direct)


def test_a_state_from_elsewhere_loads_only_when_whole_and_consistent(blobs):
    """A saved build from another server (a project archive) is checked before the
    compiled kernels index with it: each forgery is a ValueError that says what is wrong,
    and an honest state resumes to the same forest."""
    X, y = blobs
    build = CompRFBuilder(np.arange(40), y[:40], n_trees=3, random_state=2)
    build.add_answers(FeatureOracle(X).answer(build.pending_queries()))
    state = build.to_bytes()
    resumed = CompRFBuilder.from_untrusted_bytes(state, max_bytes=1 << 20)
    while not resumed.is_complete:
        resumed.add_answers(FeatureOracle(X).answer(resumed.pending_queries()))
    while not build.is_complete:
        build.add_answers(FeatureOracle(X).answer(build.pending_queries()))
    assert canonical_trees(resumed.forest()) == canonical_trees(build.forest())

    forged = {
        "its members": with_array(state, "members", lambda a: a + 1000),
        "a split node's children": with_array(state, "node_left", lambda a: np.where(a > 0, 0, a)),
        "node pivots": with_array(state, "node_pivot_right", lambda a: np.where(a >= 0, 77, a)),
        "the roots' ranges": with_array(state, "node_end", lambda a: a * 50),
        "its votes": with_array(state, "store_hi", lambda a: a - 3),
        "one root per tree": with_array(state, "roots", lambda a: a[:1]),
        "of the wrong kind": with_array(state, "members", lambda a: a.astype(float)),
        "not a saved build": b"PK\x03\x04 not a zip",
    }
    for expected, data in forged.items():
        with pytest.raises(ValueError, match=expected):
            CompRFBuilder.from_untrusted_bytes(data, max_bytes=1 << 20)
    with pytest.raises(ValueError, match="over the limit of 1,000"):
        CompRFBuilder.from_untrusted_bytes(state, max_bytes=1000)
