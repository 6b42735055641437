"""The samplers, each on its own: valid new questions, chosen for their purpose, and
better than uniform ones at it on simulated crowds."""

import numpy as np
import pytest

from app.learn import TETE, FeatureOracle, TripletBoost, random_triplets, triplet_error
from app.learn.samplers import (
    EmbeddingSampler,
    ForestLabellingSampler,
    LabellingSampler,
    PanelLabellingSampler,
    PlacementSampler,
    SamplerState,
    UniformSampler,
    student_uncertainty,
)


def clusters(n_per: int = 60, centres: int = 5, seed: int = 0, apart: bool = False):
    """Gaussian clusters in the plane: centres at random (some overlap) or `apart` on a
    circle (neighbours 3.5 standard deviations from each other's centre)."""
    rng = np.random.default_rng(seed)
    middle = rng.normal(scale=4.0, size=(centres, 2))
    if apart:
        angle = 2 * np.pi * np.arange(centres) / centres
        middle = 6.0 * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    labels = np.repeat(np.arange(centres), n_per)
    return middle[labels] + rng.normal(size=(len(labels), 2)), labels


def a_state() -> SamplerState:
    X, labels = clusters(apart=True)
    n = len(X)
    answers = random_triplets(n, 2000, FeatureOracle(X), random_state=0)
    named = np.array([f"c{label}" for label in labels], dtype=object)
    wanted = np.arange(0, n, 7)
    named[wanted[::2]] = None
    placed = np.ones(n, bool)
    new = np.arange(n - 10, n)
    placed[new[:5]] = False
    return SamplerState(
        n_items=n,
        answers=answers,
        embedding=X,
        placed=placed,
        labels=named,
        wanted=wanted,
        new_items=new,
    )


SAMPLERS = [
    UniformSampler(random_state=0),
    EmbeddingSampler(random_state=0),
    LabellingSampler(random_state=0),
    PanelLabellingSampler(random_state=0),
    ForestLabellingSampler(random_state=0),
    PlacementSampler(random_state=0),
]


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda s: type(s).__name__)
def test_every_sampler_proposes_valid_new_questions_best_first(sampler):
    state = a_state()
    queries, scores = sampler.propose(40, state)
    assert 0 < len(queries) <= 40 and len(scores) == len(queries)
    assert queries.dtype == np.int64 and queries.min() >= 0 and queries.max() < state.n_items
    a, p, q = queries.T
    assert np.all((a != p) & (a != q) & (p < q))
    assert len(np.unique(queries, axis=0)) == len(queries)
    assert state.unasked(queries).all()
    assert np.all(np.diff(scores) <= 0)
    again = type(sampler)(random_state=0).propose(40, state)
    assert np.array_equal(again.queries, queries)


def test_answered_questions_are_not_proposed_again():
    state = a_state()
    first = PlacementSampler(random_state=0).propose(30, state).queries
    answered = FeatureOracle(state.embedding).answer(first)
    state = SamplerState(
        n_items=state.n_items,
        answers=np.vstack([state.answers, answered]),
        embedding=state.embedding,
        placed=state.placed,
        new_items=state.new_items,
    )
    second = PlacementSampler(random_state=0).propose(30, state).queries
    assert len(second) == 30
    assert not set(map(tuple, first.tolist())) & set(map(tuple, second.tolist()))


def test_the_embedding_sampler_asks_where_the_map_is_unsure_about_rare_items():
    X, _ = clusters()
    n = len(X)
    rng = np.random.default_rng(1)
    # Half of the items have been asked about ten times as often.
    common = rng.random(n) < 0.5
    pool = random_triplets(n, 20_000, FeatureOracle(X), random_state=1)
    weight = np.where(common[pool].all(axis=1), 1.0, 0.1)
    answers = pool[rng.random(len(pool)) < weight * 0.2]
    state = SamplerState(n_items=n, answers=answers, embedding=X)
    chosen = EmbeddingSampler(random_state=0).propose(1000, state).queries
    uniform = UniformSampler(random_state=0).propose(2000, state).queries
    unsure, typical = student_uncertainty(X, chosen).mean(), student_uncertainty(X, uniform).mean()
    # Drawn in proportion to the score, not its top: clearly more unsure than uniform
    # questions (0.77 against 0.51 here), and the best of them first.
    assert unsure > typical + 0.15, (unsure, typical)
    head = student_uncertainty(X, chosen[:50]).mean()
    assert head > unsure + 0.1, (head, unsure)
    # Rarely asked items weigh more: 0.465 of the chosen questions' items are the common
    # ones, against 0.505 where no item has been asked yet (the same pool and draws).
    unseen = SamplerState(n_items=n, answers=np.empty((0, 3), np.int64), embedding=X)
    evenly = EmbeddingSampler(random_state=0).propose(1000, unseen).queries
    assert common[chosen].mean() < common[evenly].mean() - 0.025


def test_the_labelling_sampler_asks_between_the_two_likeliest_classes():
    state = a_state()
    wanted = state.wanted
    queries = LabellingSampler(random_state=0).propose(len(wanted), state).queries
    anchored = np.isin(queries[:, 0], wanted)
    assert anchored.mean() > 0.6
    _, labels = clusters(apart=True)
    own_class_asked = []
    for a, p, q in queries:
        assert labels[p] != labels[q]  # a pair that tells two classes apart
        if a in wanted:
            if state.placed[a]:  # an item not in the map yet could be of any class
                own_class_asked.append(labels[a] in (labels[p], labels[q]))
        else:  # a labelled item of one of the two classes, to teach the pair
            assert state.labels[a] is not None and labels[a] in (labels[p], labels[q])
    # The wanted item's own class is one of the two asked about (nearly always: the
    # clusters' tails overlap).
    assert np.mean(own_class_asked) > 0.95


def test_labelling_answers_label_the_wanted_items_better_than_as_many_uniform_ones():
    """kNN in a t-STE map of 300 items in 5 clusters (one in five unlabelled), human-like
    noise, a small budget: 1,000 answers, the last 400 from the labelling sampler (in
    four rounds, each from the map refitted) or uniform, from crowds that err alike. (Where
    the clusters overlap in the truth, no question can do better than the truth's own
    neighbours, and the two come out alike.)"""
    X, labels = clusters(seed=2, apart=True)
    n = len(X)
    scale = FeatureOracle(X).scale_for_error(0.1)
    start = random_triplets(n, 600, FeatureOracle(X, random_state=0), random_state=4)
    named = np.array([f"c{label}" for label in labels], dtype=object)
    wanted = np.random.default_rng(5).choice(n, n // 5, replace=False)
    named[wanted] = None

    def accuracy(answers):
        Y = TETE(t=1.0, random_state=0).fit_transform(answers, n)
        known = np.setdiff1d(np.arange(n), wanted)
        distance = ((Y[wanted, None] - Y[None, known]) ** 2).sum(axis=2)
        nearest = known[np.argsort(distance, axis=1)[:, :5]]
        votes = np.array([np.bincount(labels[row], minlength=5).argmax() for row in nearest])
        return np.mean(votes == labels[wanted]), Y

    found = {}
    for name, make in (("labelling", LabellingSampler), ("uniform", UniformSampler)):
        crowd = FeatureOracle(X, noise_scale=scale, random_state=3)
        answers = start
        _, Y = accuracy(answers)
        for round_ in range(4):
            state = SamplerState(n, answers, embedding=Y, labels=named, wanted=wanted)
            asked = make(random_state=round_).propose(100, state).queries
            answers = np.vstack([answers, crowd.answer(asked)])
            _, Y = accuracy(answers)
        found[name] = accuracy(answers)[0]
    assert found["labelling"] > found["uniform"] + 0.15, found


def boosting_state(answers, named, wanted, model=None) -> SamplerState:
    extra = {}
    if model is not None:
        proba = np.full((len(named), len(model.classes_)), np.nan)
        proba[wanted] = model.predict_proba(answers, wanted)
        extra = {"classes": model.classes_, "class_proba": proba}
    return SamplerState(len(named), answers, labels=named, wanted=wanted, **extra)


def test_the_panel_asks_each_pair_of_many_teachers_and_of_the_torn_wanted_items():
    """Before any model: a pair for every two classes, each asked of teachers spread over
    every class, then of every wanted item. After one: a wanted item is asked only about
    pairs between its likeliest classes."""
    X, labels = clusters(apart=True)
    n = len(X)
    named = np.array([f"c{label}" for label in labels], dtype=object)
    wanted = np.random.default_rng(1).choice(n, 50, replace=False)
    named[wanted] = None
    sampler = PanelLabellingSampler(teachers=20, random_state=0)
    first = sampler.propose(10_000, boosting_state(np.empty((0, 3), np.int64), named, wanted))
    a, p, q = first.queries.T
    assert np.all(labels[p] != labels[q]) and all(label is not None for label in named[p])
    pairs = {(int(j), int(k)) for j, k in zip(p, q, strict=True)}
    assert {tuple(sorted((labels[j], labels[k]))) for j, k in pairs} == {
        (x, y) for x in range(5) for y in range(x + 1, 5)
    }
    for j, k in pairs:
        askers = a[(p == j) & (q == k)]
        teachers = askers[~np.isin(askers, wanted)]
        assert len(teachers) == 20
        assert np.bincount(labels[teachers], minlength=5).min() >= 3  # every class teaches
        assert set(wanted) <= set(askers)  # nothing known yet: every wanted item
    # Teachers come before the wanted items (a pair nobody taught says nothing).
    assert not np.isin(a[: 20 * len(pairs)], wanted).any()

    oracle = FeatureOracle(X, noise_scale=FeatureOracle(X).scale_for_error(0.1), random_state=0)
    answers = oracle.answer(first.queries)
    train = np.setdiff1d(np.arange(n), wanted)
    model = TripletBoost(random_state=0).fit(answers, train, named[train])
    state = boosting_state(answers, named, wanted, model)
    later = PanelLabellingSampler(teachers=20, n_likely=2, random_state=0).propose(2000, state)
    asked = np.isin(later.queries[:, 0], wanted)
    assert asked.sum() >= 20
    column = {name: at for at, name in enumerate(model.classes_)}
    for x, j, k in later.queries[asked]:
        proba = state.class_proba[x]
        second = np.sort(proba)[-2]
        for reference in (j, k):
            assert proba[column[f"c{labels[reference]}"]] >= second - 1e-12


def test_a_panel_labels_the_wanted_items_by_boosting_far_better_than_uniform_questions():
    """TripletBoost (defaults) on 300 items in 5 overlapping clusters, one in five
    wanted, human-like noise at 10 %: 4,000 answers from the panel sampler (four rounds,
    each after a refit) or uniform ones."""
    X, labels = clusters(seed=2)
    n = len(X)
    named = np.array([f"c{label}" for label in labels], dtype=object)
    wanted = np.random.default_rng(5).choice(n, n // 5, replace=False)
    named[wanted] = None
    train = np.setdiff1d(np.arange(n), wanted)
    scale = FeatureOracle(X).scale_for_error(0.1)

    def accuracy(answers):
        model = TripletBoost(random_state=0).fit(answers, train, named[train])
        predicted = model.predict(answers, wanted)
        return np.mean(predicted == named_labels(labels[wanted])), model

    found = {}
    for name in ("panel", "uniform"):
        crowd = FeatureOracle(X, noise_scale=scale, random_state=3)
        answers, model = np.empty((0, 3), np.int64), None
        for round_ in range(4):
            state = boosting_state(answers, named, wanted, model)
            if name == "panel":
                asked = PanelLabellingSampler(random_state=round_).propose(1000, state).queries
            else:
                asked = UniformSampler(random_state=round_).propose(1000, state).queries
            answers = np.vstack([answers, crowd.answer(asked)])
            found[name], model = accuracy(answers)
    # (0.65-0.73 over four crowds; uniform questions leave most wanted items unsupported)
    assert found["panel"] > 0.6 and found["panel"] > found["uniform"] + 0.4, found


def test_the_wanted_items_ride_down_comparison_trees_towards_their_own_class():
    """Every question is a node's two labelled pivots (of different classes while the
    node holds several), asked of the node's labelled members and of the wanted items
    that reached it. At the roots a wanted item's own class is in the pair by chance (2
    of 5 classes); as the answers grow the trees, the pairs it is asked about come from
    its own neighbourhood."""
    X, labels = clusters(apart=True)
    n = len(X)
    named = named_labels(labels)
    wanted = np.random.default_rng(1).choice(n, 50, replace=False)
    named[wanted] = None
    oracle = FeatureOracle(X, random_state=0)
    answers = np.empty((0, 3), np.int64)
    own_class_in_pair = []
    for round_ in range(6):
        state = SamplerState(n, answers, labels=named, wanted=wanted)
        queries = ForestLabellingSampler(random_state=round_).propose(1000, state).queries
        a, p, q = queries.T
        if round_ == 0:
            assert np.all(labels[p] != labels[q])
        assert np.all(named[p] != None) and np.all(named[q] != None)  # noqa: E711
        riding = np.isin(a, wanted)
        assert riding.any() and not riding[np.argmin(riding) :].any()  # riders first
        own_class_in_pair.append(
            np.mean(((labels[a] == labels[p]) | (labels[a] == labels[q]))[riding])
        )
        answers = np.vstack([answers, oracle.answer(queries)])
    # (0.40 at the roots here, 0.99 after five rounds)
    assert own_class_in_pair[0] < 0.6 and own_class_in_pair[-1] > 0.9, own_class_in_pair
    # The same answers give the same trees: a refresh proposes what is still missing.
    again = ForestLabellingSampler(random_state=9).propose(1000, state).queries
    assert np.array_equal(again, queries)


def test_a_refresh_reads_a_bounded_number_of_answers():
    """Trees open one after another while questions are wanted, until the answers read
    reach `max_replayed`: a refresh on a project with millions of answers stays bounded."""
    X, labels = clusters(apart=True)
    n = len(X)
    named = named_labels(labels)
    named[:30] = None
    answers = random_triplets(n, 5000, FeatureOracle(X), random_state=0)
    state = SamplerState(n, answers, labels=named, wanted=np.arange(30))

    def pairs(sampler) -> int:
        return len(np.unique(sampler.propose(100_000, state).queries[:, 1:], axis=0))

    assert pairs(ForestLabellingSampler(max_trees=5)) == 5  # one root pair a tree
    assert pairs(ForestLabellingSampler(max_trees=5, max_replayed=0)) == 1


def test_comparison_trees_label_the_wanted_items_by_boosting_far_better_than_uniform():
    """TripletBoost (defaults) on 300 items in 5 overlapping clusters, one in five
    wanted, human-like noise at 10 %: 4,000 answers in four rounds from the trees or
    uniform. (A panel of pairs does as well here, 0.67-0.97 on three such crowds, where
    the clusters' overlap bounds both; on digits the trees label 0.82 against 0.77:
    benchmarks/sampler_gain.py.)"""
    X, labels = clusters(seed=2)
    n = len(X)
    named = named_labels(labels)
    wanted = np.random.default_rng(5).choice(n, n // 5, replace=False)
    named[wanted] = None
    train = np.setdiff1d(np.arange(n), wanted)
    scale = FeatureOracle(X).scale_for_error(0.1)
    found = {}
    for name, make in (("trees", ForestLabellingSampler), ("uniform", UniformSampler)):
        crowd = FeatureOracle(X, noise_scale=scale, random_state=3)
        answers = np.empty((0, 3), np.int64)
        for round_ in range(4):
            state = SamplerState(n, answers, labels=named, wanted=wanted)
            asked = make(random_state=round_).propose(1000, state).queries
            answers = np.vstack([answers, crowd.answer(asked)])
        model = TripletBoost(random_state=0).fit(answers, train, named[train])
        found[name] = np.mean(model.predict(answers, wanted) == named_labels(labels[wanted]))
    # (0.67 against 0.07)
    assert found["trees"] > 0.6 and found["trees"] > found["uniform"] + 0.4, found


def named_labels(codes) -> np.ndarray:
    return np.array([f"c{code}" for code in codes], dtype=object)


def test_placement_locates_new_items_with_fewer_answers_than_uniform_questions():
    """Ten new items, twelve answers each (four against spread references, then eight
    near where those put it) against twelve uniform questions about each: the placed
    rows satisfy more fresh triplets about the new items."""
    X, _ = clusters(seed=6)
    n = len(X)
    new = np.arange(n - 10, n)
    old = np.arange(n - 10)
    oracle = FeatureOracle(X, random_state=7)
    old_only = random_triplets(n - 10, 6000, FeatureOracle(X[old]), random_state=8)
    model = TETE(t=1.0, random_state=0).fit(old_only, n - 10)
    fresh = np.array(
        [
            (x, *np.random.default_rng(x).choice(old, 2, replace=False))
            for x in new
            for _ in range(40)
        ]
    )
    fresh = oracle.answer(fresh)

    def placed_error(answers):
        rows = model.place(answers, len(new))
        Y = np.vstack([model.embedding_, rows])
        return triplet_error(Y, fresh)

    embedding = np.vstack([model.embedding_, np.zeros((10, model.embedding_.shape[1]))])
    placed = np.r_[np.ones(n - 10, bool), np.zeros(10, bool)]
    state = SamplerState(n, embedding=embedding, placed=placed, new_items=new)
    coarse = oracle.answer(PlacementSampler(random_state=0).propose(40, state).queries)
    embedding[new] = model.place(coarse, len(new))
    placed[new] = True
    state = SamplerState(n, answers=coarse, embedding=embedding, placed=placed, new_items=new)
    fine = oracle.answer(PlacementSampler(random_state=0).propose(80, state).queries)
    chosen = np.vstack([coarse, fine])
    assert np.bincount(chosen[:, 0], minlength=n)[new].min() >= 10

    rng = np.random.default_rng(9)
    uniform = np.array([(x, *rng.choice(old, 2, replace=False)) for x in new for _ in range(12)])
    uniform = oracle.answer(uniform)
    assert placed_error(chosen) < placed_error(uniform) - 0.02


def test_large_projects_bound_the_work_to_the_least_asked_items():
    """With thousands of wanted or new items, a round looks at 4n wanted (n new) items,
    the least asked first, never at all of them."""
    rng = np.random.default_rng(0)
    n = 3000
    Y = rng.normal(size=(n, 2))
    labels = np.array([f"c{c}" for c in rng.integers(0, 4, n)], dtype=object)
    wanted = np.arange(1000, 3000)
    labels[wanted] = None
    answers = random_triplets(n, 20_000, FeatureOracle(Y), random_state=1)
    placed = np.ones(n, bool)
    placed[2500:] = False
    state = SamplerState(
        n,
        answers,
        embedding=Y,
        placed=placed,
        labels=labels,
        wanted=wanted,
        new_items=np.arange(2000, 3000),
    )
    counts = state.answer_counts()
    asked = LabellingSampler(random_state=0).propose(50, state).queries
    anchors = np.unique(asked[:, 0][np.isin(asked[:, 0], wanted)])
    assert len(anchors) <= 200
    assert counts[anchors].max() <= np.sort(counts[wanted])[200]
    placing = PlacementSampler(random_state=0).propose(30, state).queries
    assert len(np.unique(placing[:, 0])) <= 30
    assert counts[placing[:, 0]].max() <= np.sort(counts[2000:])[30]


def test_bad_states_say_what_is_wrong():
    with pytest.raises(ValueError, match="n_items must be at least 3"):
        SamplerState(n_items=2)
    with pytest.raises(ValueError, match=r"embedding must have shape \(5, d\)"):
        SamplerState(n_items=5, embedding=np.zeros((4, 2)))
    with pytest.raises(ValueError, match="wanted must be positions in 0..4"):
        SamplerState(n_items=5, wanted=[7])
    with pytest.raises(ValueError, match="answers"):
        SamplerState(n_items=5, answers=[[0, 1, 9]])
    with pytest.raises(ValueError, match="classes and class_proba go together"):
        SamplerState(n_items=5, classes=["a", "b"])
    with pytest.raises(ValueError, match=r"class_proba must have shape \(5, 2\)"):
        SamplerState(n_items=5, classes=["a", "b"], class_proba=np.zeros((5, 3)))
