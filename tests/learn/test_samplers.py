"""The samplers, each on its own: valid new questions, chosen for their purpose, and
better than uniform ones at it on simulated crowds."""

import numpy as np
import pytest

from app.learn import TETE, FeatureOracle, random_triplets, triplet_error
from app.learn.samplers import (
    EmbeddingSampler,
    LabellingSampler,
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
    chosen = EmbeddingSampler(random_state=0).propose(200, state).queries
    uniform = UniformSampler(random_state=0).propose(2000, state).queries
    unsure, typical = student_uncertainty(X, chosen).mean(), student_uncertainty(X, uniform).mean()
    assert unsure > 0.85 and unsure > typical + 0.3, (unsure, typical)
    assert common[chosen].mean() < common[uniform].mean() - 0.1


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
