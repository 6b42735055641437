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

from app.learn.comprf import CompRFBuilder, decided_from_votes, query_keys
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
    classes, class_proba: a model's class probabilities per item (a row of NaN where it
        has none), its columns named by `classes`.

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
    classes: np.ndarray | None = None
    class_proba: np.ndarray | None = None
    _asked: np.ndarray | None = field(default=None, init=False, repr=False)
    _counts: np.ndarray | None = field(default=None, init=False, repr=False)

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
        if (self.classes is None) != (self.class_proba is None):
            raise ValueError("classes and class_proba go together: give both or neither")
        if self.classes is not None:
            self.classes = np.asarray(self.classes, dtype=str)
            self.class_proba = np.asarray(self.class_proba, dtype=np.float64)
            if self.class_proba.shape != (self.n_items, len(self.classes)):
                raise ValueError(
                    f"class_proba must have shape ({self.n_items}, {len(self.classes)}): "
                    f"one row per item, one column per class; got {self.class_proba.shape}"
                )
        for name in ("wanted", "new_items"):
            value = getattr(self, name)
            if value is not None:
                value = np.unique(np.asarray(value, dtype=np.int64))
                if len(value) and (value[0] < 0 or value[-1] >= self.n_items):
                    raise ValueError(f"{name} must be positions in 0..{self.n_items - 1}")
                setattr(self, name, value)

    def answer_counts(self) -> np.ndarray:
        """How many answers each item took part in (counted once a state: every sampler
        of a round asks; read-only)."""
        if self._counts is None:
            self._counts = np.bincount(self.answers.ravel(), minlength=self.n_items)
            self._counts.flags.writeable = False
        return self._counts

    def least_asked(self, items: np.ndarray, most: int, rng) -> np.ndarray:
        """At most `most` of `items`, those with the fewest answers (ties at random): a
        sampler's bounded work on a large project."""
        if len(items) <= most:
            return items
        asked = self.answer_counts()[items] + rng.random_sample(len(items))
        return items[np.argsort(asked)[:most]]

    def unasked(self, queries: np.ndarray) -> np.ndarray:
        """Which of `queries` (anchor, p, q with p < q) no answer holds yet."""
        if len(self.answers) == 0 or len(queries) == 0:
            return np.ones(len(queries), bool)
        if self._asked is None:  # sorted once: samplers ask this many times a round
            self._asked = np.unique(_keys(_ordered(self.answers), self.n_items))
        keys = _keys(queries, self.n_items)
        where = np.minimum(np.searchsorted(self._asked, keys), len(self._asked) - 1)
        return self._asked[where] != keys

    def item_labels(self) -> np.ndarray:
        """Every item's label, None where unknown."""
        return self.labels if self.labels is not None else np.full(self.n_items, None, object)

    def placed_items(self) -> np.ndarray:
        """Per item, whether its row of the embedding was learnt (none without one)."""
        return self.placed if self.placed is not None else np.zeros(self.n_items, bool)

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


def _map_class_proba(Y, wanted, labelled, codes, n_classes, placed, n_neighbors) -> np.ndarray:
    """Class probabilities of the wanted items from their nearest labelled items in the
    map (weighted by 1/distance); all classes alike for an item without a place."""
    proba = np.zeros((len(wanted), n_classes))
    k = min(n_neighbors, len(labelled))
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
    """Questions the current embedding is unsure of, about items little is known of:
    from a random pool of `pool_factor` × n queries, n drawn with chances in proportion
    to their score, uncertainty (the t-STE probability's distance from a coin flip) to
    the power `uncertainty_power`, times rarity, and returned best first. Without an
    embedding, by rarity alone.

    Drawn, not the top n: the very top of a pool is the near ties that people answer at
    chance, about the same few items; on 300 planted points (a crowd erring on near ties)
    taking the top n stopped gaining after 12,000 answers. How far to lean towards the
    unsure ones, with the service's 10 % of random questions beside them
    (benchmarks/sampler_gain.py; answers to reach uniform questions' held-out error at
    20,000, 12 crowds on planted points, 6 on digits mapped in 2-D, a map that cannot
    hold them):

    | power | planted points | digits in 2-D |
    |---|---|---|
    | 1 | 0.77x (11 of 12 reached) | 3 of 6 reached |
    | 2 | 0.71x (12 of 12) | 3 of 6 |
    | 3 | 0.66x (12 of 12) | 1 of 6, and up to 0.025 worse than uniform at 20,000 |

    Beyond 2, the map's certainty is trusted where it is misplaced. The information
    gain of the crowd kernel's sampler (each anchor in turn, its place weighted by how
    well it explains the anchor's answers, the pair whose answer would say most about
    it) did about as well as power 1 on the planted points and worse on digits."""

    def __init__(
        self, pool_factor: int = 20, uncertainty_power: float = 2.0, random_state=None
    ) -> None:
        self.pool_factor = pool_factor
        self.uncertainty_power = uncertainty_power
        self.random_state = random_state

    def propose(self, n: int, state: SamplerState) -> Proposal:
        rng = check_random_state(self.random_state)
        pool = _ordered(_random_queries(state.n_items, max(self.pool_factor * n, 256), rng))
        pool = np.unique(pool, axis=0)
        pool = pool[state.unasked(pool)]
        scores = _rarity(state, pool)
        if state.embedding is not None:
            placed = state.placed_items()[pool].all(axis=1)
            unsure = np.where(placed, student_uncertainty(state.embedding, pool), 1.0)
            scores = scores * unsure**self.uncertainty_power
        if not len(pool):
            return Proposal(np.empty((0, 3), np.int64), np.empty(0))
        weights = scores + 1e-12
        drawn = rng.choice(len(pool), min(n, len(pool)), replace=False, p=weights / weights.sum())
        return _best(pool[drawn], scores[drawn], n, state)


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
        wanted = np.sort(state.least_asked(wanted, 4 * n, rng))
        Y = state.embedding
        usable = Y is not None
        if usable:  # references must have a place in the map
            labelled = labelled[state.placed_items()[labelled]]
            if len(labelled) < 2:
                return Proposal(np.empty((0, 3), np.int64), np.empty(0))
        classes, codes = np.unique(state.item_labels()[labelled].astype(str), return_inverse=True)
        if len(classes) < 2:
            return Proposal(np.empty((0, 3), np.int64), np.empty(0))
        proba = np.full((len(wanted), len(classes)), 1.0 / len(classes))
        if usable:
            proba = _map_class_proba(
                Y, wanted, labelled, codes, len(classes), state.placed, self.n_neighbors
            )
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
            if Y is not None:
                distance = ((Y[near] - Y[x]) ** 2).sum(axis=1)
                near = near[np.argsort(distance)[: 4 * self.teachers]]
            chosen = rng.choice(near, size=min(self.teachers, len(near)), replace=False)
            for teacher in chosen:
                queries.append((teacher, j, k))
                scores.append(0.5 * priority[row])
        return _best(np.array(queries, np.int64), np.array(scores), n, state)

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


class PanelLabellingSampler:
    """Questions that let a learner from triplets alone (TripletBoost) label the wanted
    items.

    TripletBoost learns what a reference pair (j, k) says about labels only from labelled
    items that answered "closer to j or to k?", and predicts an item only from its own
    answers to such pairs: questions scattered at random teach it almost nothing. So the
    questions here form a panel of reference pairs, each pair two members of different
    classes, answered by `teachers` labelled items (of every class alike, so the pair's
    label sets are learnt for all of them) and by each wanted item that is torn between
    the two classes. The panel starts with a pair for every two classes (while nothing is
    known of a wanted item, all classes are likely) and grows pairs between the classes
    the wanted items are still torn between: their `n_likely` likeliest classes (None:
    all), by the current model where the state has its class probabilities, by the
    nearest labelled items in the map else. On 300 digits (10 classes, TripletBoost's
    vote shares, 20,000 answers) asking every wanted item every pair labelled best
    (0.77 over six crowds, against 0.76 for the top 4 and 0.72 for the top 6): the
    boosted classifiers' early ranking is too unsure to narrow on, hence the default.

    A new pair's members are the class members nearest the wanted items that asked for it
    (in the map; at random without one), and the pair is asked of its teachers first.
    Order: unfinished pairs' teachers, then wanted items' questions about taught pairs,
    then new pairs (their teachers first); wanted items least decided and least asked
    first."""

    def __init__(self, teachers: int = 48, n_likely: int | None = None, random_state=None) -> None:
        self.teachers = teachers
        self.n_likely = n_likely
        self.random_state = random_state

    def propose(self, n: int, state: SamplerState) -> Proposal:
        rng = check_random_state(self.random_state)
        empty = Proposal(np.empty((0, 3), np.int64), np.empty(0))
        labelled = state.labelled()
        wanted = state.wanted if state.wanted is not None else np.empty(0, np.int64)
        if len(wanted) == 0 or len(labelled) < 2 or n <= 0:
            return empty
        classes, codes = np.unique(state.item_labels()[labelled].astype(str), return_inverse=True)
        if len(classes) < 2:
            return empty
        wanted = np.sort(state.least_asked(wanted, 4 * n, rng))
        code_of = np.full(state.n_items, -1)
        code_of[labelled] = codes
        proba = self._proba(state, wanted, labelled, codes, classes)
        # A learner's vote shares can be flat (TripletBoost's are) while their order
        # still tells: the likely classes are the top `n_likely`, or all while nothing
        # is known.
        ranked = np.argsort(-(proba + rng.random_sample(proba.shape) * 1e-9), axis=1)
        known = proba.max(axis=1) > proba.min(axis=1) + 1e-12
        if self.n_likely is None:
            known[:] = False
        likely = np.ones(proba.shape, bool)
        likely[known] = False
        rows = np.flatnonzero(known)[:, None]
        likely[rows, ranked[known, : self.n_likely]] = True
        ordered = np.sort(proba, axis=1)
        margin = (ordered[:, -1] - ordered[:, -2]) / (ordered[:, -1] + 1e-12)
        priority = (1.0 - margin) / np.sqrt(1.0 + state.answer_counts()[wanted])
        priority = priority / (priority.max() + 1e-12)  # in (0, 1]: scores stay in tiers

        panel = self._panel(state, code_of)
        n_classes = len(classes)
        torn = likely[:, :, None] & likely[:, None, :]  # (wanted, class, class)
        upper = np.triu(np.ones((n_classes, n_classes), bool), 1)
        demand = np.einsum("w,wab->ab", priority, torn.astype(float)) * upper
        members = [labelled[codes == c] for c in range(n_classes)]
        queries, scores = [], []

        def teach(j: int, k: int, missing: int, tier: float, weight: float) -> None:
            pool = labelled[(labelled != j) & (labelled != k)]
            triples = np.stack([pool, np.full(len(pool), j), np.full(len(pool), k)], axis=1)
            pool = pool[state.unasked(_ordered(triples))]
            chosen = _balanced(pool, code_of[pool], missing, rng)
            for teacher in chosen:
                queries.append((teacher, j, k))
                scores.append(tier + 0.5 + 0.49 * weight)

        def ask_wanted(j: int, k: int, a: int, b: int, tier: float) -> None:
            rows = np.flatnonzero(torn[:, a, b])
            if not len(rows):
                return
            triples = np.stack([wanted[rows], np.full(len(rows), j), np.full(len(rows), k)], 1)
            for row in rows[state.unasked(_ordered(triples))]:
                queries.append((wanted[row], j, k))
                scores.append(tier + 0.49 * priority[row])

        total_demand = demand.sum() + 1e-12
        for (j, k), count in panel.items():
            a, b = sorted((code_of[j], code_of[k]))
            if demand[a, b] <= 0:
                continue
            if count < self.teachers:  # tier 2: finish teaching a pair in use
                teach(j, k, self.teachers - count, 2.0, demand[a, b] / total_demand)
            if count >= self.teachers // 2:  # tier 1: taught enough to be worth asking
                ask_wanted(j, k, a, b, 1.0)
        # Tier 0: new pairs between the classes most asked for per pair they already have.
        pairs_of = np.zeros((n_classes, n_classes))
        for j, k in panel:
            a, b = sorted((code_of[j], code_of[k]))
            pairs_of[a, b] += 1
        need = demand / (1.0 + pairs_of) ** 2
        budget = n - len(queries)
        used = {(code_of[j], code_of[k], j) for j, k in panel} | {
            (code_of[k], code_of[j], k) for j, k in panel
        }
        for flat in np.argsort(-need, axis=None, kind="stable"):
            if budget <= 0:
                break
            a, b = np.unravel_index(flat, need.shape)
            if need[a, b] <= 0:
                break
            rows = np.flatnonzero(torn[:, a, b])
            asking, weight = wanted[rows], priority[rows]
            j = self._prototype(members[a], a, b, asking, weight, state, used, rng)
            k = self._prototype(members[b], b, a, asking, weight, state, used, rng)
            if j < 0 or k < 0:
                continue
            used |= {(a, b, j), (b, a, k)}
            j, k = min(j, k), max(j, k)
            before = len(queries)
            teach(j, k, self.teachers, 0.0, need[a, b] / (need.max() + 1e-12))
            ask_wanted(j, k, a, b, 0.0)
            budget -= len(queries) - before
        if not queries:
            return empty
        return _best(np.array(queries, np.int64), np.array(scores), n, state)

    def _proba(self, state, wanted, labelled, codes, classes) -> np.ndarray:
        proba = np.full((len(wanted), len(classes)), 1.0 / len(classes))
        known = np.zeros(len(wanted), bool)
        if state.class_proba is not None:
            column = {name: at for at, name in enumerate(state.classes)}
            given = np.zeros((len(wanted), len(classes)))
            for c, name in enumerate(classes):
                if name in column:
                    given[:, c] = state.class_proba[wanted, column[name]]
            sums = given.sum(axis=1)
            known = np.isfinite(sums) & (sums > 0)
            proba[known] = given[known] / sums[known, None]
        if state.embedding is not None and not known.all():
            placed = labelled[state.placed_items()[labelled]]
            if len(placed) >= 1:
                rest = wanted[~known]
                on_map = np.searchsorted(labelled, placed)
                proba[~known] = _map_class_proba(
                    state.embedding, rest, placed, codes[on_map], len(classes), state.placed, 10
                )
        return proba

    def _panel(self, state, code_of) -> dict[tuple[int, int], int]:
        """The reference pairs in use: two labelled items of different classes that at
        least a few labelled items answered about (a random question's pair rarely has
        more than one), with how many labelled items did."""
        answers = _ordered(state.answers)
        a, p, q = answers.T
        keep = (code_of[a] >= 0) & (code_of[p] >= 0) & (code_of[q] >= 0)
        keep &= code_of[p] != code_of[q]
        keys, counts = np.unique(p[keep] * state.n_items + q[keep], return_counts=True)
        enough = counts >= max(3, self.teachers // 8)
        return {
            (int(key // state.n_items), int(key % state.n_items)): int(count)
            for key, count in zip(keys[enough], counts[enough], strict=True)
        }

    @staticmethod
    def _prototype(members, own, other, asking, weight, state, used, rng) -> int:
        """A member of class `own` not yet paired with class `other`: the one nearest the
        wanted items that ask for the pair (their weighted centre in the map), or a random
        one without a map; -1 if none is left."""
        free = np.array([m for m in members if (own, other, m) not in used], np.int64)
        if not len(free):
            return -1
        Y = state.embedding
        if Y is None:
            return int(rng.choice(free))
        free = free[state.placed_items()[free]]
        placed = state.placed_items()[asking]
        if not len(free):
            return -1
        if not placed.any():
            return int(rng.choice(free))
        centre = np.average(Y[asking[placed]], axis=0, weights=weight[placed] + 1e-12)
        return int(free[np.argmin(((Y[free] - centre) ** 2).sum(axis=1))])


class ForestLabellingSampler:
    """The questions of comparison trees over the labelled items, with the wanted items
    routed down them as they grow: what lets a learner from triplets alone (TripletBoost)
    label the wanted items.

    Each tree is CompRF's (`CompRFBuilder`, one answer a question): a node's two pivots
    are labelled items among its members (of different classes while it holds several),
    every member is asked "closer to this pivot or that one?", and the node splits on
    the answers. A wanted item rides along: at each node with pivots it is asked the
    same question as the members, and goes down the side its answer says. So every
    reference pair is asked of the labelled items that teach what it says and of the
    wanted items it concerns, and the pairs narrow, node by node, to the classes an item
    may still belong to. On 300 digits (60 wanted, human-like noise 10 %, 20,000
    answers, TripletBoost's defaults; benchmarks/sampler_gain.py, six crowds) these
    questions labelled 0.83 on average (0.78-0.90) against 0.77 for a panel of pairs
    asked of fixed teachers (`PanelLabellingSampler`); with 72 % of the answers theirs
    (the service's labelling share) and the rest uniform, 0.80 against 0.73.

    The trees are grown from the answers alone, seeded by `forest_seed`, so the same
    answers give the same trees at every refresh and each answer counts once. Trees are
    opened one after another until `n` questions are found; the wanted items' questions
    come first (they are what a prediction reads), then the members', earlier trees
    first. Each tree holds at most `max_members` labelled items (drawn per tree), so a
    tree costs about max_members x log2(max_members) answers however large the project;
    a refresh reads each tree's own answers only, and stops opening trees once it has
    read `max_replayed` (a tree of 256 members reads a million answers in about 0.2 s).
    """

    def __init__(
        self,
        max_members: int = 256,
        max_trees: int = 64,
        max_replayed: int = 5_000_000,
        forest_seed: int = 0,
        random_state=None,
    ) -> None:
        self.max_members = max_members
        self.max_trees = max_trees
        self.max_replayed = max_replayed
        self.forest_seed = forest_seed
        self.random_state = random_state

    def propose(self, n: int, state: SamplerState) -> Proposal:
        empty = Proposal(np.empty((0, 3), np.int64), np.empty(0))
        labelled = state.labelled()
        wanted = state.wanted if state.wanted is not None else np.empty(0, np.int64)
        if len(wanted) == 0 or len(labelled) < 2 or n <= 0:
            return empty
        if len(np.unique(state.item_labels()[labelled].astype(str))) < 2:
            return empty
        rng = check_random_state(self.random_state)
        wanted = np.sort(state.least_asked(wanted, 4 * n, rng))
        riders, members_asked = [], []
        found = replayed = 0
        is_wanted = np.zeros(state.n_items, bool)
        is_wanted[wanted] = True
        for tree in range(self.max_trees):
            if replayed > self.max_replayed:  # a bounded refresh on a huge project
                break
            builder, relevant = self._tree(tree, labelled, state, is_wanted)
            replayed += relevant
            if builder is None:
                continue
            asked = self._ride(builder, wanted)
            riders.append(asked)
            found += len(asked)
            if not builder.is_complete:
                pending = builder.pending_queries()
                members_asked.append(pending)
                found += len(pending)
            if found >= n:
                break
        queries = riders + members_asked
        if not sum(len(q) for q in queries):
            return empty
        # Tiers: the wanted items' questions (2), then the members' (1); earlier trees
        # first within a tier.
        scores = [
            np.full(len(asked), tier - order / (self.max_trees + 1))
            for tier, found_in_trees in ((2.0, riders), (1.0, members_asked))
            for order, asked in enumerate(found_in_trees)
        ]
        return _best(np.concatenate(queries), np.concatenate(scores), n, state)

    def _tree(self, tree: int, labelled: np.ndarray, state: SamplerState, is_wanted):
        """Tree number `tree` as far as the answers grow it (None: one class only), and
        how many answers it read: those about two of its members, asked of a member or
        a wanted item (the others cannot concern it)."""
        rng = np.random.default_rng([self.forest_seed, tree])
        members = labelled
        if len(labelled) > self.max_members:
            members = np.sort(rng.choice(labelled, self.max_members, replace=False))
        y = state.item_labels()[members].astype(str)
        seed = int(rng.integers(2**31))
        if len(np.unique(y)) < 2:
            return None, 0
        builder = CompRFBuilder(members, y, n_trees=1, random_state=seed)
        is_member = np.zeros(state.n_items, bool)
        is_member[members] = True
        a, closer, farther = state.answers.T
        relevant = is_member[closer] & is_member[farther] & (is_member[a] | is_wanted[a])
        if relevant.any():
            builder.add_answers(state.answers[relevant])
        return builder, int(relevant.sum())

    @staticmethod
    def _ride(builder, wanted: np.ndarray) -> np.ndarray:
        """The wanted items taken down the tree by their answers: the question each one
        waits for, at the first node with pivots it has not answered."""
        nodes = builder.nodes
        at = np.full(len(wanted), builder.roots[0])
        riding = np.arange(len(wanted))
        asked = []
        while len(riding):
            node = at[riding]
            left, right = nodes.pivot_left[node], nodes.pivot_right[node]
            has_pivots = left >= 0  # a leaf has none
            riding, node = riding[has_pivots], node[has_pivots]
            left, right = left[has_pivots], right[has_pivots]
            x = wanted[riding]  # never a pivot: wanted items are not members
            lo, hi = builder.store.votes(query_keys(x, left, right))
            decided, lower_closer = decided_from_votes(lo, hi, 1)
            waiting = ~decided
            asked.append(np.stack([x[waiting], left[waiting], right[waiting]], axis=1))
            # Down the side its answer says, where the node has split already.
            moving = decided & (nodes.left[node] >= 0)
            go_left = lower_closer[moving] == (left[moving] < right[moving])
            at[riding[moving]] = np.where(
                go_left, nodes.left[node[moving]], nodes.right[node[moving]]
            )
            riding = riding[moving]
        return np.concatenate(asked) if asked else np.empty((0, 3), np.int64)


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
        known = np.flatnonzero(state.placed_items())
        known = known[~np.isin(known, new)]
        if len(known) < 2:
            return Proposal(np.empty((0, 3), np.int64), np.empty(0))
        references = self._spread(Y, known, rng)
        asked = state.answer_counts()
        new = state.least_asked(new, n, rng)
        per_item = max(1, -(-n // len(new)))
        queries, scores = [], []
        scale = np.sqrt(((Y[known] - Y[known].mean(axis=0)) ** 2).sum(axis=1).mean()) + 1e-12
        for x in new:
            urgency = 1.0 / np.sqrt(1.0 + asked[x])
            if state.placed_items()[x]:
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


def _balanced(pool: np.ndarray, codes: np.ndarray, count: int, rng) -> np.ndarray:
    """`count` items of `pool` spread evenly over their classes (`codes`), at random
    within a class."""
    if count >= len(pool):
        return pool
    order = rng.permutation(len(pool))
    pool, codes = pool[order], codes[order]
    # The i-th member of its class (in the shuffled order) comes in round i.
    rank = np.zeros(len(pool), np.int64)
    for c in np.unique(codes):
        where = np.flatnonzero(codes == c)
        rank[where] = np.arange(len(where))
    return pool[np.argsort(rank, kind="stable")[:count]]
