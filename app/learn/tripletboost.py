"""TripletBoost: boosting abstaining triplet classifiers from passive, noisy answers
(Perrot & von Luxburg; ALGORITHMS.md §2, AdaBoost.MO).

A weak classifier is a reference pair (j, k) of training items with two label sets: an
item i known to be closer to j gets o_j, one known to be closer to k gets o_k, any other
item abstains. Each iteration samples j from the items' weight marginal and k from the
items of another label, so its cost is only the answers about that one pair: answers are
indexed by their unordered reference pair (CSR), and the marginals are sampled with one
Fenwick tree per class. Prediction merges the classifiers of each pair and looks pairs up
by binary search: O(|T_x| log C) per item.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
from numba import njit
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from app.learn.comprf import ID_BITS, MAX_ITEMS, query_keys
from app.learn.triplets import check_triplets

MAX_CLASSES = 63  # label sets are bit masks in an int64


def _majority(triplets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One decided answer per query (anchor, {p, q}): rows (anchor, lower, higher) and
    whether the lower id is the closer one.

    Conflicting answers take the majority; a tie drops the query (it abstains)."""
    anchor, closer, farther = triplets.T
    keys, inverse = np.unique(query_keys(anchor, closer, farther), return_inverse=True)
    inverse = inverse.ravel()
    lower_votes = np.bincount(inverse, weights=closer < farther, minlength=len(keys))
    votes = np.bincount(inverse, minlength=len(keys))
    decided = 2 * lower_votes != votes
    keys = keys[decided]
    queries = np.stack(
        [keys >> (2 * ID_BITS), (keys >> ID_BITS) & (MAX_ITEMS - 1), keys & (MAX_ITEMS - 1)], axis=1
    )
    return queries, (2 * lower_votes > votes)[decided]


@njit(cache=True)
def _fenwick_add(tree, index, delta):
    index += 1
    while index < len(tree):
        tree[index] += delta
        index += index & -index


@njit(cache=True)
def _fenwick_find(tree, target):
    """The smallest index whose prefix sum exceeds `target`."""
    position = 0
    step = 1
    while step * 2 < len(tree):
        step *= 2
    while step > 0:
        nxt = position + step
        if nxt < len(tree) and tree[nxt] <= target:
            position = nxt
            target -= tree[nxt]
        step //= 2
    return position


@njit(cache=True)
def _rebuild(weights, labels, trees, class_total):
    trees[:] = 0.0
    class_total[:] = 0.0
    for i in range(weights.shape[0]):
        marginal = weights[i].sum()
        _fenwick_add(trees[labels[i]], i, marginal)
        class_total[labels[i]] += marginal


@njit(cache=True)
def _pick(trees, class_total, exclude, n_items):
    """An item drawn from the weight marginal, among classes other than `exclude`."""
    total = 0.0
    for c in range(len(class_total)):
        if c != exclude:
            total += class_total[c]
    if total <= 0.0:
        return -1
    target = np.random.random() * total
    chosen = -1
    for c in range(len(class_total)):
        if c == exclude or class_total[c] <= 0.0:
            continue
        chosen = c
        if target < class_total[c]:
            break
        target -= class_total[c]
    item = _fenwick_find(trees[chosen], min(target, class_total[chosen] * (1 - 1e-12)))
    return min(item, n_items - 1)


@njit(cache=True)
def _seed(seed):
    np.random.seed(seed)


@njit(cache=True)
def _boost(
    n_iter,
    weights,
    labels,
    n_classes,
    pair_keys,
    offsets,
    anchors,
    closer_is_lower,
    trees,
    class_total,
    out_j,
    out_k,
    out_mask_j,
    out_mask_k,
    out_alpha,
):
    """Run `n_iter` boosting rounds, writing one classifier per round; returns how many."""
    n_items = weights.shape[0]
    smoothing = 1.0 / n_items
    score_j = np.zeros(n_classes)
    score_k = np.zeros(n_classes)
    for round_ in range(n_iter):
        if round_ % 20000 == 0:
            # Renormalise and rebuild the sampling trees: floating sums drift over
            # millions of updates, and unnormalised weights would overflow.
            total = weights.sum()
            weights /= total
            _rebuild(weights, labels, trees, class_total)
        j = _pick(trees, class_total, -1, n_items)
        k = _pick(trees, class_total, labels[j], n_items) if j >= 0 else -1
        out_j[round_], out_k[round_] = j, k
        out_mask_j[round_], out_mask_k[round_], out_alpha[round_] = 0, 0, 0.0
        if k < 0:
            continue
        lower, higher = min(j, k), max(j, k)
        key = lower * n_items + higher
        slot = np.searchsorted(pair_keys, key)
        if slot >= len(pair_keys) or pair_keys[slot] != key:
            continue  # no answers about this pair: every item abstains
        start, end = offsets[slot], offsets[slot + 1]
        score_j[:] = 0.0
        score_k[:] = 0.0
        for entry in range(start, end):
            i = anchors[entry]
            to_j = closer_is_lower[entry] == (lower == j)
            for y in range(n_classes):
                signed = weights[i, y] if y == labels[i] else -weights[i, y]
                if to_j:
                    score_j[y] += signed
                else:
                    score_k[y] += signed
        mask_j = 0
        mask_k = 0
        for y in range(n_classes):
            if score_j[y] > 0:
                mask_j |= 1 << y
            if score_k[y] > 0:
                mask_k |= 1 << y
        total = class_total.sum()
        plus = 0.0
        minus = 0.0
        for entry in range(start, end):
            i = anchors[entry]
            mask = mask_j if closer_is_lower[entry] == (lower == j) else mask_k
            for y in range(n_classes):
                inside = (mask >> y) & 1
                if (y == labels[i]) == (inside == 1):
                    plus += weights[i, y]
                else:
                    minus += weights[i, y]
        alpha = 0.5 * np.log((plus / total + smoothing) / (minus / total + smoothing))
        grow, shrink = np.exp(alpha), np.exp(-alpha)
        for entry in range(start, end):
            i = anchors[entry]
            mask = mask_j if closer_is_lower[entry] == (lower == j) else mask_k
            before = weights[i].sum()
            for y in range(n_classes):
                inside = (mask >> y) & 1
                # w *= exp(-alpha * s * g): s = +1 for the true label, g = +1 inside h(i)
                if (y == labels[i]) == (inside == 1):
                    weights[i, y] *= shrink
                else:
                    weights[i, y] *= grow
            delta = weights[i].sum() - before
            _fenwick_add(trees[labels[i]], i, delta)
            class_total[labels[i]] += delta
        out_mask_j[round_], out_mask_k[round_], out_alpha[round_] = mask_j, mask_k, alpha
    return n_iter


class TripletBoost(BaseEstimator):
    """Boosting from triplets: learns labels from "which is closer?" answers alone.

    Parameters
    ----------
    n_iter : boosting rounds (the paper runs 10^6).
    random_state : seed of the pair sampling.

    Fit with ``fit(triplets, items, y)``: `items` are the labelled training items (ids)
    and `triplets` any answers; those whose three items are all training items are used.
    Predict for new items from their own triplets against training items:
    ``predict(triplets, items)``; ``support(triplets, items)`` says how many classifiers
    spoke for each item. An item with no support is predicted as None (an object array),
    never guessed. ``partial_fit(triplets)`` continues boosting as answers arrive.
    """

    def __init__(self, n_iter: int = 10_000, random_state=None) -> None:
        self.n_iter = n_iter
        self.random_state = random_state

    def fit(self, triplets, items, y) -> TripletBoost:
        if not isinstance(self.n_iter, Integral) or self.n_iter < 1:
            raise ValueError(f"n_iter must be a positive integer; got {self.n_iter!r}")
        items = np.asarray(items)
        if items.ndim != 1 or (items.size and items.dtype.kind not in "iu"):
            raise ValueError("items must be a 1-d array of integer item ids")
        if len(np.unique(items)) != len(items):
            raise ValueError("items must not repeat an id")
        y = np.asarray(y)
        if y.shape != items.shape:
            raise ValueError(f"y must hold one label per item ({len(items)}); got shape {y.shape}")
        self.classes_, labels = np.unique(y, return_inverse=True)
        if len(self.classes_) > MAX_CLASSES:
            raise ValueError(f"at most {MAX_CLASSES} classes; got {len(self.classes_)}")
        self.items_ = items.astype(np.int64)
        self._labels = labels.astype(np.int64).ravel()
        n = len(items)
        self._weights = np.full((n, len(self.classes_)), 1.0 / (n * len(self.classes_)))
        self._rng_seed = int(check_random_state(self.random_state).randint(0, 2**31 - 1))
        self._classifiers = [np.empty(0, np.int64)] * 4 + [np.empty(0)]
        self._triplets = np.empty((0, 3), np.int64)
        return self._boost_more(check_triplets(triplets), self.n_iter)

    def partial_fit(self, triplets, n_iter: int | None = None) -> TripletBoost:
        """Add answers and continue boosting from the weights reached (`n_iter` rounds)."""
        check_is_fitted(self, "classes_")
        return self._boost_more(check_triplets(triplets), n_iter or self.n_iter)

    def _index(self) -> tuple[np.ndarray, ...]:
        """Answers among training items, one per query, grouped by reference pair."""
        position = np.full(int(max(self.items_.max(), self._triplets.max(initial=0))) + 1, -1)
        position[self.items_] = np.arange(len(self.items_))
        local = position[self._triplets]
        local = local[(local >= 0).all(axis=1)]
        if len(local) == 0:
            raise ValueError("no triplet has all three items among the training items")
        queries, lower_closer = _majority(local)
        n = len(self.items_)
        keys = queries[:, 1] * n + queries[:, 2]
        order = np.argsort(keys, kind="stable")
        keys, anchors, lower_closer = keys[order], queries[order, 0], lower_closer[order]
        pair_keys, starts = np.unique(keys, return_index=True)
        offsets = np.append(starts, len(keys)).astype(np.int64)
        return pair_keys, offsets, anchors.astype(np.int64), lower_closer

    def _boost_more(self, triplets: np.ndarray, n_iter: int) -> TripletBoost:
        self._triplets = np.concatenate([self._triplets, triplets])
        pair_keys, offsets, anchors, lower_closer = self._index()
        n, n_classes = self._weights.shape
        size = 1
        while size <= n:
            size *= 2
        trees = np.zeros((n_classes, size + 1))
        class_total = np.zeros(n_classes)
        out = (
            np.empty(n_iter, np.int64),
            np.empty(n_iter, np.int64),
            np.empty(n_iter, np.int64),
            np.empty(n_iter, np.int64),
            np.empty(n_iter),
        )
        _seed(self._rng_seed + len(self._classifiers[0]))
        _boost(
            n_iter,
            self._weights,
            self._labels,
            n_classes,
            pair_keys,
            offsets,
            anchors,
            lower_closer,
            trees,
            class_total,
            *out,
        )
        self._classifiers = [
            np.concatenate([old, new]) for old, new in zip(self._classifiers, out, strict=True)
        ]
        self.n_iter_ = len(self._classifiers[0])
        self._merge()
        return self

    def _merge(self) -> None:
        """One entry per reference pair: vote vectors for 'closer to the lower id' and
        'closer to the higher id', sorted by pair key for binary search."""
        j, k, mask_j, mask_k, alpha = self._classifiers
        spoke = (alpha != 0) & (k >= 0)
        j, k, mask_j, mask_k, alpha = j[spoke], k[spoke], mask_j[spoke], mask_k[spoke], alpha[spoke]
        ids_j, ids_k = self.items_[j], self.items_[k]
        lower_is_j = ids_j < ids_k
        mask_lower = np.where(lower_is_j, mask_j, mask_k)
        mask_higher = np.where(lower_is_j, mask_k, mask_j)
        keys = (np.minimum(ids_j, ids_k) << 21) | np.maximum(ids_j, ids_k)
        self.pair_keys_, inverse = np.unique(keys, return_inverse=True)
        bits = np.arange(len(self.classes_))
        votes = np.zeros((len(self.pair_keys_), 2, len(self.classes_)))
        np.add.at(votes[:, 0], inverse, alpha[:, None] * ((mask_lower[:, None] >> bits) & 1))
        np.add.at(votes[:, 1], inverse, alpha[:, None] * ((mask_higher[:, None] >> bits) & 1))
        self.pair_votes_ = votes
        self.n_classifiers_ = int(spoke.sum())

    def _scores(self, triplets, items) -> tuple[np.ndarray, np.ndarray]:
        check_is_fitted(self, "pair_votes_")
        items = np.asarray(items, dtype=np.int64)
        triplets = check_triplets(triplets)
        ours = triplets[np.isin(triplets[:, 0], items)]
        scores = np.zeros((len(items), len(self.classes_)))
        support = np.zeros(len(items), np.int64)
        if len(ours) == 0:
            return scores, support
        queries, lower_closer = _majority(ours)
        keys = (queries[:, 1] << 21) | queries[:, 2]
        slot = np.minimum(np.searchsorted(self.pair_keys_, keys), len(self.pair_keys_) - 1)
        known = self.pair_keys_[slot] == keys
        row = np.searchsorted(np.sort(items), queries[:, 0])
        row = np.argsort(items)[row]
        side = np.where(lower_closer, 0, 1)
        np.add.at(scores, row[known], self.pair_votes_[slot[known], side[known]])
        np.add.at(support, row[known], 1)
        return scores, support

    def support(self, triplets, items) -> np.ndarray:
        """How many reference pairs each item's triplets share with the classifiers."""
        return self._scores(triplets, items)[1]

    def predict_proba(self, triplets, items) -> np.ndarray:
        """Normalised positive vote shares per class; rows of NaN for unsupported items."""
        scores, support = self._scores(triplets, items)
        positive = np.clip(scores, 0, None)
        sums = positive.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            proba = np.where(sums > 0, positive / sums, np.nan)
        proba[(support > 0) & (sums[:, 0] == 0)] = 1.0 / len(self.classes_)
        return proba

    def predict(self, triplets, items) -> np.ndarray:
        """Labels from the classifiers' weighted votes; None where no classifier spoke."""
        scores, support = self._scores(triplets, items)
        labels = self.classes_[np.argmax(scores, axis=1)]
        if np.all(support > 0):
            return labels
        result = labels.astype(object)
        result[support == 0] = None
        return result
