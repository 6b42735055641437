"""Samplers: which questions teach the models most, one sampler per purpose.

A rater's time that CompRF's build does not need goes to questions proposed here: to
label the items whose label is wanted, to sharpen the embedding where it is unsure, to
place new items, or uniformly at random (the baseline, and the only answers that measure
a model without bias). Each sampler's ``propose(n, state)`` returns at most `n` queries
``(anchor, p, q)`` (positions ``0..n_items-1``, three different items, ``p < q``: which
of p and q is closer to the anchor?) with a score each, best first. `state` is what the
models know now (`SamplerState`); proposing never fits a model, so it stays cheap enough
to run in the worker after every refit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from sklearn.utils import check_random_state

from app.learn.triplets import check_triplets


class Proposal(NamedTuple):
    queries: np.ndarray  # (m, 3) int64: anchor, p, q with p < q
    scores: np.ndarray  # (m,) float64, higher first


@dataclass
class SamplerState:
    """What the samplers may use: every part but `n_items` is optional.

    answers: the answered triplets so far, (anchor, closer, farther) positions.
    embedding: the current embedding, (n_items, d).
    placed: which rows of `embedding` hold a position learnt from answers (default: all);
        a new item's row may be placed provisionally (e.g. by TETE.place from its first
        answers), the others are ignored.
    labels: one label per item, None where unknown (object array).
    wanted: positions whose label is wanted (unlabelled items, the test split).
    new_items: positions to place in the embedding (items added since its fit).

    Queries already answered are not proposed again (adaptive samplers would otherwise
    ask the same most-unsure question every round).
    """

    n_items: int
    answers: np.ndarray = field(default_factory=lambda: np.empty((0, 3), np.int64))
    embedding: np.ndarray | None = None
    placed: np.ndarray | None = None
    labels: np.ndarray | None = None
    wanted: np.ndarray | None = None
    new_items: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.n_items < 3:
            raise ValueError(f"n_items must be at least 3; got {self.n_items}")
        self.answers = check_triplets(self.answers, self.n_items, name="answers")
        if self.embedding is not None:
            self.embedding = np.asarray(self.embedding, dtype=np.float64)
            if self.embedding.ndim != 2 or len(self.embedding) != self.n_items:
                raise ValueError(
                    f"embedding must have shape ({self.n_items}, d); got {self.embedding.shape}"
                )
            if self.placed is None:
                self.placed = np.ones(self.n_items, bool)
            self.placed = np.asarray(self.placed, dtype=bool)
            if self.placed.shape != (self.n_items,):
                raise ValueError(f"placed must have one flag per item ({self.n_items})")
        if self.labels is not None:
            self.labels = np.asarray(self.labels, dtype=object)
            if self.labels.shape != (self.n_items,):
                raise ValueError(f"labels must have one entry per item ({self.n_items})")
        for name in ("wanted", "new_items"):
            value = getattr(self, name)
            if value is not None:
                value = np.unique(np.asarray(value, dtype=np.int64))
                if len(value) and (value[0] < 0 or value[-1] >= self.n_items):
                    raise ValueError(f"{name} must be positions in 0..{self.n_items - 1}")
                setattr(self, name, value)

    def answer_counts(self) -> np.ndarray:
        """How many answers each item took part in."""
        return np.bincount(self.answers.ravel(), minlength=self.n_items)

    def unasked(self, queries: np.ndarray) -> np.ndarray:
        """Which of `queries` (anchor, p, q with p < q) no answer holds yet."""
        if len(self.answers) == 0 or len(queries) == 0:
            return np.ones(len(queries), bool)
        asked = _keys(_ordered(self.answers), self.n_items)
        return ~np.isin(_keys(queries, self.n_items), asked)

    def labelled(self) -> np.ndarray:
        """Positions with a known label that is not itself wanted."""
        if self.labels is None:
            return np.empty(0, np.int64)
        known = np.array([label is not None for label in self.labels], dtype=bool)
        if self.wanted is not None:
            known[self.wanted] = False
        return np.flatnonzero(known)


def _ordered(queries: np.ndarray) -> np.ndarray:
    """Queries with p < q (the answer does not depend on the order shown)."""
    queries = np.asarray(queries, dtype=np.int64).reshape(-1, 3)
    low = np.minimum(queries[:, 1], queries[:, 2])
    high = np.maximum(queries[:, 1], queries[:, 2])
    return np.stack([queries[:, 0], low, high], axis=1)


def _keys(queries: np.ndarray, n_items: int) -> np.ndarray:
    """One integer per query (anchor, p, q)."""
    a, p, q = (column.astype(np.int64) for column in queries.T)
    return (a * n_items + p) * n_items + q


def _valid(queries: np.ndarray) -> np.ndarray:
    a, p, q = queries.T
    return (a != p) & (a != q) & (p != q)


def _best(queries: np.ndarray, scores: np.ndarray, n: int, state: SamplerState) -> Proposal:
    """The `n` best distinct valid queries not answered yet, best first (ties in a stable
    order)."""
    queries = _ordered(queries)
    keep = _valid(queries)
    keep[keep] = state.unasked(queries[keep])
    queries, scores = queries[keep], np.asarray(scores, dtype=np.float64)[keep]
    order = np.argsort(-scores, kind="stable")
    queries, scores = queries[order], scores[order]
    _, first = np.unique(queries, axis=0, return_index=True)
    first = np.sort(first)[:n]
    return Proposal(queries[first], scores[first])


def _random_queries(n_items: int, size: int, rng: np.random.RandomState) -> np.ndarray:
    found = rng.randint(0, n_items, size=(size, 3)).astype(np.int64)
    return found[_valid(found)]


def student_uncertainty(embedding: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """How unsure the embedding is of each query's answer, in [0, 1]: 1 - |2P - 1|, with
    P the Student-t kernel's probability (t-STE's) that the anchor is closer to p."""
    Y = np.asarray(embedding, dtype=np.float64)
    a, p, q = np.asarray(queries, dtype=np.int64).T
    near = 1.0 / (1.0 + ((Y[a] - Y[p]) ** 2).sum(axis=1))
    far = 1.0 / (1.0 + ((Y[a] - Y[q]) ** 2).sum(axis=1))
    chance = near / (near + far)
    return 1.0 - np.abs(2.0 * chance - 1.0)


def _rarity(state: SamplerState, queries: np.ndarray) -> np.ndarray:
    """How little is known about a query's items: the mean over its three items of
    sqrt((1 + mean count) / (1 + the item's answers)), so an unseen item weighs most."""
    counts = state.answer_counts().astype(np.float64)
    ratio = np.sqrt((1.0 + counts.mean()) / (1.0 + counts[queries]))
    return ratio.mean(axis=1)


class UniformSampler:
    """Uniformly random queries: the baseline, and the unbiased answers that held-out
    metrics use."""

    def __init__(self, random_state=None) -> None:
        self.random_state = random_state

    def propose(self, n: int, state: SamplerState) -> Proposal:
        rng = check_random_state(self.random_state)
        queries = _random_queries(state.n_items, 2 * n + 16, rng)
        return _best(queries, np.zeros(len(queries)), n, state)


class EmbeddingSampler:
    """Questions the current embedding is least sure of, about items little is known
    of: from a random pool of `pool_factor` × n queries, the best by uncertainty (the
    t-STE probability's distance from a coin flip) times rarity. Without an embedding,
    the rarest of the pool."""

    def __init__(self, pool_factor: int = 20, random_state=None) -> None:
        self.pool_factor = pool_factor
        self.random_state = random_state

    def propose(self, n: int, state: SamplerState) -> Proposal:
        rng = check_random_state(self.random_state)
        pool = _ordered(_random_queries(state.n_items, max(self.pool_factor * n, 256), rng))
        scores = _rarity(state, pool)
        if state.embedding is not None:
            placed = state.placed[pool].all(axis=1)
            unsure = np.where(placed, student_uncertainty(state.embedding, pool), 1.0)
            scores = scores * unsure
        return _best(pool, scores, n, state)


class LabellingSampler:
    """Questions that decide the wanted items' labels.

    For each wanted item x, its two most likely classes (the labelled items nearest to
    it in the embedding vote, weighted by 1/distance; all classes alike without one) and
    from each the labelled item nearest to x: "is x closer to this one of class A or to
    that one of class B?" The same reference pair is also asked of `teachers` labelled
    items of those two classes near x, so that a learner from triplets (TripletBoost)
    learns what the pair says about labels. Items whose label is least decided (the
    smallest margin between their two best classes) and least asked come first."""

    def __init__(self, n_neighbors: int = 10, teachers: int = 1, random_state=None) -> None:
        self.n_neighbors = n_neighbors
        self.teachers = teachers
        self.random_state = random_state

    def propose(self, n: int, state: SamplerState) -> Proposal:
        rng = check_random_state(self.random_state)
        labelled = state.labelled()
        wanted = state.wanted if state.wanted is not None else np.empty(0, np.int64)
        if len(wanted) == 0 or len(labelled) < 2:
            return Proposal(np.empty((0, 3), np.int64), np.empty(0))
        if len(wanted) > 4 * n:  # bounded work: the least asked (ties at random) first
            asked = state.answer_counts()[wanted] + rng.random_sample(len(wanted))
            wanted = np.sort(wanted[np.argsort(asked)[: 4 * n]])
        Y = state.embedding
        usable = Y is not None
        if usable:  # references must have a place in the map
            labelled = labelled[state.placed[labelled]]
            if len(labelled) < 2:
                return Proposal(np.empty((0, 3), np.int64), np.empty(0))
        classes, codes = np.unique(state.labels[labelled].astype(str), return_inverse=True)
        if len(classes) < 2:
            return Proposal(np.empty((0, 3), np.int64), np.empty(0))
        proba = np.full((len(wanted), len(classes)), 1.0 / len(classes))
        if usable:
            proba = self._class_proba(Y, wanted, labelled, codes, len(classes), state.placed)
        ranked = np.argsort(-(proba + rng.random_sample(proba.shape) * 1e-9), axis=1)
        first, second = ranked[:, 0], ranked[:, 1]
        rows = np.arange(len(wanted))
        margin = proba[rows, first] - proba[rows, second]
        asked = state.answer_counts()[wanted].astype(np.float64)
        priority = (1.0 - margin) / np.sqrt(1.0 + asked)
        queries, scores = [], []
        members = [labelled[codes == c] for c in range(len(classes))]
        # Enough pairs per item to fill n (the nearest may have been answered already),
        # the first preferred.
        per_item = max(3, -(-n // len(wanted)))
        for row, x in enumerate(wanted):
            for attempt in range(per_item):
                j = self._representative(
                    members[first[row]], x, Y if usable else None, rng, per_item
                )
                k = self._representative(
                    members[second[row]], x, Y if usable else None, rng, per_item
                )
                queries.append((x, j, k))
                scores.append(priority[row] * (1.0 - 0.01 * attempt / per_item))
            near = np.concatenate([members[first[row]], members[second[row]]])
            near = near[(near != j) & (near != k)]
            if len(near) == 0:
                continue
            if usable:
                distance = ((Y[near] - Y[x]) ** 2).sum(axis=1)
                near = near[np.argsort(distance)[: 4 * self.teachers]]
            chosen = rng.choice(near, size=min(self.teachers, len(near)), replace=False)
            for teacher in chosen:
                queries.append((teacher, j, k))
                scores.append(0.5 * priority[row])
        return _best(np.array(queries, np.int64), np.array(scores), n, state)

    def _class_proba(self, Y, wanted, labelled, codes, n_classes, placed) -> np.ndarray:
        proba = np.zeros((len(wanted), n_classes))
        k = min(self.n_neighbors, len(labelled))
        rows = max(1, 2_000_000 // (len(labelled) * Y.shape[1]))  # ~16 MB of distances
        for start in range(0, len(wanted), rows):
            block = wanted[start : start + rows]
            distance = ((Y[block, None, :] - Y[None, labelled, :]) ** 2).sum(axis=2)
            nearest = np.argpartition(distance, k - 1, axis=1)[:, :k]
            weight = 1.0 / (np.sqrt(np.take_along_axis(distance, nearest, axis=1)) + 1e-9)
            for column in range(k):
                np.add.at(
                    proba[start : start + len(block)],
                    (np.arange(len(block)), codes[nearest[:, column]]),
                    weight[:, column],
                )
        unplaced = ~placed[wanted]
        proba[unplaced] = 1.0
        return proba / proba.sum(axis=1, keepdims=True)

    @staticmethod
    def _representative(members, x, Y, rng, among: int) -> int:
        """A class member near x (one of the `among` nearest, for variety), or a random
        member without an embedding."""
        members = members[members != x]
        if Y is None:
            return int(rng.choice(members))
        distance = ((Y[members] - Y[x]) ** 2).sum(axis=1)
        nearest = members[np.argsort(distance)[:among]]
        return int(rng.choice(nearest))


class PlacementSampler:
    """Questions that locate new items in the embedding, binary-search-like.

    References are well spread over the embedding (farthest-point sampling among the
    placed items). A new item without a position of its own yet is asked about pairs of
    references in disjoint pairs (each answer halves where it can be); once its row is placed
    provisionally (`placed`, e.g. by TETE.place from its first answers), about pairs of
    known items near that position whose answer is unsure there and that lie apart (an
    answer then moves it most). Items least asked come first."""

    def __init__(self, n_references: int = 32, n_neighbors: int = 12, random_state=None) -> None:
        self.n_references = n_references
        self.n_neighbors = n_neighbors
        self.random_state = random_state

    def propose(self, n: int, state: SamplerState) -> Proposal:
        rng = check_random_state(self.random_state)
        new = state.new_items if state.new_items is not None else np.empty(0, np.int64)
        if len(new) == 0 or state.embedding is None:
            return Proposal(np.empty((0, 3), np.int64), np.empty(0))
        Y = state.embedding
        known = np.flatnonzero(state.placed)
        known = known[~np.isin(known, new)]
        if len(known) < 2:
            return Proposal(np.empty((0, 3), np.int64), np.empty(0))
        references = self._spread(Y, known, rng)
        asked = state.answer_counts()
        if len(new) > n:  # bounded work: the least asked new items (ties at random)
            new = new[np.argsort(asked[new] + rng.random_sample(len(new)))[:n]]
        per_item = max(1, -(-n // len(new)))
        queries, scores = [], []
        scale = np.sqrt(((Y[known] - Y[known].mean(axis=0)) ** 2).sum(axis=1).mean()) + 1e-12
        for x in new:
            urgency = 1.0 / np.sqrt(1.0 + asked[x])
            if state.placed[x]:
                distance = ((Y[known] - Y[x]) ** 2).sum(axis=1)
                near = known[np.argsort(distance)[: self.n_neighbors]]
                p, q = np.triu_indices(len(near), 1)
                pairs = np.stack([np.full(len(p), x), near[p], near[q]], axis=1)
                apart = np.sqrt(((Y[near[p]] - Y[near[q]]) ** 2).sum(axis=1)) / scale
                value = student_uncertainty(Y, pairs) * np.minimum(apart, 1.0)
            else:
                # Disjoint pairs of references in a random order: each answer says on
                # which side of another line the item lies (the farthest pairs alone
                # would all ask the same: "this end or that one?").
                shuffled = rng.permutation(references)
                if len(shuffled) % 2:
                    shuffled = shuffled[:-1]
                p, q = shuffled[0::2], shuffled[1::2]
                pairs = np.stack([np.full(len(p), x), p, q], axis=1)
                value = 1.0 - np.arange(len(p)) / (2.0 * len(p))
            unasked = state.unasked(_ordered(pairs))
            pairs, value = pairs[unasked], value[unasked]
            top = np.argsort(-value, kind="stable")[:per_item]
            queries.append(pairs[top])
            scores.append(urgency * value[top])
        return _best(np.concatenate(queries), np.concatenate(scores), n, state)

    def _spread(self, Y, known, rng) -> np.ndarray:
        """Farthest-point sampling: each next reference the known item farthest from
        those chosen."""
        count = min(self.n_references, len(known))
        chosen = [int(rng.choice(known))]
        distance = ((Y[known] - Y[chosen[0]]) ** 2).sum(axis=1)
        while len(chosen) < count:
            pick = int(known[np.argmax(distance)])
            chosen.append(pick)
            distance = np.minimum(distance, ((Y[known] - Y[pick]) ** 2).sum(axis=1))
        return np.array(chosen, np.int64)
