"""TripletBoost: boosting abstaining triplet classifiers from passive, noisy answers
(Perrot & von Luxburg; ALGORITHMS.md §2, AdaBoost.MO).

A weak classifier is a reference pair (j, k) of training items with two label sets: an
item i known to be closer to j gets o_j, one known to be closer to k gets o_k, any other
item abstains. Each iteration samples j from the items' weight marginal and k from the
items of another label, so its cost is only the answers about that one pair: answers are
indexed by their unordered reference pair (CSR), and the marginals are sampled with one
Fenwick tree per class. Answers are held as vote counts per query, so the majority is
exact as answers accumulate. Prediction merges the classifiers of each pair and looks
pairs up in a hash table: O(|T_x|) expected per item, whatever the number of classifiers.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
from numba import njit
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from app.learn._hashing import EMPTY, _probe, capacity_for
from app.learn.comprf import ID_BITS, MAX_ITEMS, _check_items
from app.learn.triplets import check_triplets

MAX_CLASSES = 63  # label sets are bit masks in an int64


def _index_answers(answers, triplets, local, n, dense=None):
    """Group answers by their unordered reference pair: CSR over pairs sorted by key
    (``lower * n + higher`` in training positions), one entry per (pair, anchor) holding
    the votes for "closer to the lower position" and all votes.

    `answers` is the index so far (possibly empty); new triplets have global ids, mapped
    through `local` (those naming a non-training item are skipped). O(answers): the new
    answers are counted per pair, placed by a counting sort, then merged pair by pair with
    the held ones, folding repeated anchors into one entry."""
    # Pairs are counted in a dense array when it is small next to the answers (a random
    # access in a few MiB); else in a hash table, 10x slower per answer but O(pairs).
    if dense is None:
        dense = n * n <= max(1 << 22, len(triplets) // 2)
    pair_of_answer, pair_keys, counts = _count_pairs(triplets, local, n, dense)
    order = np.flatnonzero(counts) if dense else np.argsort(pair_keys)
    keys = order if dense else pair_keys[order]
    starts = np.zeros(len(counts), np.int64)
    starts[order] = np.cumsum(counts[order]) - counts[order]
    packed = _place_answers(triplets, local, pair_of_answer, starts)
    return _merge_answers(*answers, keys, starts[order], counts[order], packed, n)


@njit(cache=True, nogil=True)
def _count_pairs(triplets, local, n, dense):
    """Each answer's pair id (-1 if skipped), each pair id's key, and its answer count."""
    pair_of_answer = np.empty(len(triplets), np.int64)
    if dense:  # the pair id is the key
        pair_keys = np.empty(0, np.int64)
        counts = np.zeros(n * n, np.int64)
    else:
        most_pairs = max(1, min(len(triplets), n * (n - 1) // 2))
        table = np.full((capacity_for(most_pairs), 2), EMPTY, np.int64)
        slots = table[:, 0]
        pair_keys = np.empty(most_pairs, np.int64)
        counts = np.zeros(most_pairs, np.int64)
    n_pairs = 0
    for t in range(len(triplets)):
        a, c, f = triplets[t, 0], triplets[t, 1], triplets[t, 2]
        if max(a, c, f) >= len(local) or local[a] < 0 or local[c] < 0 or local[f] < 0:
            pair_of_answer[t] = -1
            continue
        key = min(local[c], local[f]) * n + max(local[c], local[f])
        if not dense:
            slot = _probe(slots, key)
            if slots[slot] == EMPTY:
                table[slot, 0], table[slot, 1], pair_keys[n_pairs] = key, n_pairs, key
                n_pairs += 1
            key = table[slot, 1]
        counts[key] += 1
        pair_of_answer[t] = key
    if dense:
        return pair_of_answer, pair_keys, counts
    return pair_of_answer, pair_keys[:n_pairs], counts[:n_pairs]


@njit(cache=True, nogil=True)
def _place_answers(triplets, local, pair_of_answer, starts):
    """Counting sort of the new answers by pair, each packed as anchor * 2 + (closer is
    the lower position): one 8-byte write per answer."""
    fill = starts.copy()
    total = 0
    for t in range(len(triplets)):
        total += pair_of_answer[t] >= 0
    packed = np.empty(total, np.int64)
    for t in range(len(triplets)):
        pair = pair_of_answer[t]
        if pair >= 0:
            lower_closer = local[triplets[t, 1]] < local[triplets[t, 2]]
            packed[fill[pair]] = local[triplets[t, 0]] * 2 + lower_closer
            fill[pair] += 1
    return packed


@njit(cache=True, nogil=True)
def _merge_answers(
    old_keys, old_offsets, old_anchors, old_lower, old_votes, new_keys, starts, counts, packed, n
):
    """Merge held and new answers pair by pair (both key-sorted), one entry per anchor."""
    size = len(old_anchors) + len(packed)
    keys = np.empty(len(old_keys) + len(new_keys), np.int64)
    offsets = np.zeros(len(keys) + 1, np.int64)
    anchors = np.empty(size, np.int32)
    lower = np.empty(size, np.int32)
    votes = np.empty(size, np.int32)
    stamp = np.full(n, -1, np.int64)
    where = np.empty(n, np.int64)
    old, new, pair, out = 0, 0, 0, 0
    while old < len(old_keys) or new < len(new_keys):
        take_old = new == len(new_keys) or (old < len(old_keys) and old_keys[old] <= new_keys[new])
        take_new = old == len(old_keys) or (new < len(new_keys) and new_keys[new] <= old_keys[old])
        keys[pair] = old_keys[old] if take_old else new_keys[new]
        if take_old:
            for at in range(old_offsets[old], old_offsets[old + 1]):
                a = old_anchors[at]
                stamp[a], where[a] = pair, out
                anchors[out], lower[out], votes[out] = a, old_lower[at], old_votes[at]
                out += 1
            old += 1
        if take_new:
            for at in range(starts[new], starts[new] + counts[new]):
                a, lower_closer = packed[at] >> 1, packed[at] & 1
                if stamp[a] != pair:
                    stamp[a], where[a] = pair, out
                    anchors[out], lower[out], votes[out] = a, 0, 0
                    out += 1
                lower[where[a]] += lower_closer
                votes[where[a]] += 1
            new += 1
        pair += 1
        offsets[pair] = out
    return keys[:pair], offsets[: pair + 1], anchors[:out], lower[:out], votes[:out]


@njit(cache=True, nogil=True)
def _fenwick_add(tree, index, delta):
    index += 1
    while index < len(tree):
        tree[index] += delta
        index += index & -index


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def _rebuild(weights, labels, trees, class_total):
    trees[:] = 0.0
    class_total[:] = 0.0
    for i in range(weights.shape[0]):
        marginal = weights[i].sum()
        _fenwick_add(trees[labels[i]], i, marginal)
        class_total[labels[i]] += marginal


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def _seed(seed):
    np.random.seed(seed)


@njit(cache=True, nogil=True)
def _boost(
    n_iter,
    weights,
    labels,
    n_classes,
    pair_keys,
    offsets,
    anchors,
    lower_votes,
    votes,
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
            if 2 * lower_votes[entry] == votes[entry]:
                continue  # a tie: no answer, the classifier abstains on this item
            i = anchors[entry]
            to_j = (2 * lower_votes[entry] > votes[entry]) == (lower == j)
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
            if 2 * lower_votes[entry] == votes[entry]:
                continue
            i = anchors[entry]
            mask = mask_j if (2 * lower_votes[entry] > votes[entry]) == (lower == j) else mask_k
            for y in range(n_classes):
                inside = (mask >> y) & 1
                if (y == labels[i]) == (inside == 1):
                    plus += weights[i, y]
                else:
                    minus += weights[i, y]
        alpha = 0.5 * np.log((plus / total + smoothing) / (minus / total + smoothing))
        grow, shrink = np.exp(alpha), np.exp(-alpha)
        for entry in range(start, end):
            if 2 * lower_votes[entry] == votes[entry]:
                continue
            i = anchors[entry]
            mask = mask_j if (2 * lower_votes[entry] > votes[entry]) == (lower == j) else mask_k
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


@njit(cache=True, nogil=True)
def _merge_pairs(ids_j, ids_k, mask_j, mask_k, alpha, n_classes):
    """One row per reference pair (global ids, key ``lower << ID_BITS | higher``): the
    summed votes of its classifiers for "closer to the lower id" and "closer to the
    higher id"."""
    slots = np.full(capacity_for(len(alpha)), EMPTY, np.int64)
    row_of_slot = np.empty(len(slots), np.int64)
    keys = np.empty(len(alpha), np.int64)
    votes = np.zeros((len(alpha), 2, n_classes))
    n_rows = 0
    for c in range(len(alpha)):
        lower_is_j = ids_j[c] < ids_k[c]
        key = (min(ids_j[c], ids_k[c]) << ID_BITS) | max(ids_j[c], ids_k[c])
        slot = _probe(slots, key)
        if slots[slot] == EMPTY:
            slots[slot], row_of_slot[slot], keys[n_rows] = key, n_rows, key
            n_rows += 1
        row = row_of_slot[slot]
        mask_lower = mask_j[c] if lower_is_j else mask_k[c]
        mask_higher = mask_k[c] if lower_is_j else mask_j[c]
        for y in range(n_classes):
            if (mask_lower >> y) & 1:
                votes[row, 0, y] += alpha[c]
            if (mask_higher >> y) & 1:
                votes[row, 1, y] += alpha[c]
    return keys[:n_rows].copy(), votes[:n_rows].copy()


@njit(cache=True, nogil=True)
def _pair_table(keys):
    """A hash table from pair key to row, sized for the pairs: prediction probes it once
    per answer, and a small table stays in cache."""
    table = np.full((capacity_for(len(keys)), 2), EMPTY, np.int64)
    for row in range(len(keys)):
        slot = _probe(table[:, 0], keys[row])
        table[slot, 0], table[slot, 1] = keys[row], row
    return table


@njit(cache=True, nogil=True)
def _score_items(triplets, row_of_id, n_rows, table, pair_votes, scores, support):
    """Add each item's decided answers' pair votes to its scores.

    A counting sort groups the answers by anchor, each packed into one int64 (its pair
    key and which side was closer), so that every later pass reads memory in order. Each
    item's answers are folded into their majority in a small hash table that stays in
    cache (slots hold the key and both vote counts), and each decided query costs one
    lookup in the pair table: O(|T_x|) expected per item."""
    counts = np.zeros(n_rows + 1, np.int64)
    for t in range(len(triplets)):
        a = triplets[t, 0]
        if a < len(row_of_id) and row_of_id[a] >= 0:
            counts[row_of_id[a] + 1] += 1
    for r in range(n_rows):
        counts[r + 1] += counts[r]
    fill = counts[:-1].copy()
    grouped = np.empty(counts[n_rows], np.int64)
    for t in range(len(triplets)):
        a = triplets[t, 0]
        if a < len(row_of_id) and row_of_id[a] >= 0:
            c, f = triplets[t, 1], triplets[t, 2]
            lower_closer = 1 if c < f else 0
            grouped[fill[row_of_id[a]]] = (((min(c, f) << ID_BITS) | max(c, f)) << 1) | lower_closer
            fill[row_of_id[a]] += 1
    widest = 0
    for r in range(n_rows):
        widest = max(widest, counts[r + 1] - counts[r])
    buffer = np.full((capacity_for(widest), 2), EMPTY, np.int64)
    used = np.empty(widest, np.int64)
    pair_slots, pair_rows = table[:, 0], table[:, 1]
    for r in range(n_rows):
        local = buffer[: capacity_for(counts[r + 1] - counts[r])]
        slots = local[:, 0]
        n_used = 0
        for at in range(counts[r], counts[r + 1]):
            key = grouped[at] >> 1
            slot = _probe(slots, key)
            if slots[slot] == EMPTY:
                local[slot, 0], local[slot, 1] = key, 0
                used[n_used] = slot
                n_used += 1
            # all votes in the high 32 bits, votes for the lower id in the low 32
            local[slot, 1] += (np.int64(1) << 32) | (grouped[at] & 1)
        for u in range(n_used):
            slot = used[u]
            lower, votes = local[slot, 1] & 0xFFFFFFFF, local[slot, 1] >> 32
            if 2 * lower != votes:
                found = _probe(pair_slots, local[slot, 0])
                if pair_slots[found] == local[slot, 0]:
                    scores[r] += pair_votes[pair_rows[found], 0 if 2 * lower > votes else 1]
                    support[r] += 1
            local[slot, 0] = EMPTY


class TripletBoost(BaseEstimator):
    """Boosting from triplets: learns labels from "which is closer?" answers alone.

    Parameters
    ----------
    n_iter : boosting rounds per run. A round draws a reference pair by the items'
        weights and abstains where no answer is about that pair; a round costs only the
        answers about its pair (10^5 rounds: ~0.05 s on 20,000 answers).
    n_runs : boosted runs that vote together, each from uniform weights with its own
        draws (keyword only). Which pairs one long run happens to draw moves its labels,
        and its weights end up on the items whose answers are noisiest. Labelling 60 of
        300 digits from 20,000 human-like answers (six crowds, ten seeds each), one run
        of 10^5 rounds was right on 0.79 of them on average, >= 0.75 for 80 % of the
        seeds and 0.68 at worst; 20 runs of 20,000 rounds voting 0.81, 98 % and 0.70.
        On the paper's iris and moons settings they match one run of 10^5 rounds
        (``benchmarks/tripletboost_paper.py`` prints both).
    random_state : seed of the pair sampling.

    Fit with ``fit(triplets, items, y)``: `items` are the labelled training items (ids)
    and `triplets` any answers; those whose three items are all training items are used.
    Predict for new items from their own triplets against training items:
    ``predict(triplets, items)``; ``support(triplets, items)`` says how many classifiers
    spoke for each item. An item with no support is predicted as None (an object array),
    never guessed. ``partial_fit(triplets)`` continues every run as answers arrive
    (``n_iter_`` counts the rounds of each run).
    """

    _parameter_constraints: dict = {
        "n_iter": [Interval(Integral, 1, None, closed="left")],
        "n_runs": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, n_iter: int = 20_000, random_state=None, *, n_runs: int = 20) -> None:
        self.n_iter = n_iter
        self.n_runs = n_runs
        self.random_state = random_state

    def fit(self, triplets, items, y) -> TripletBoost:
        self._validate_params()
        items = _check_items(items)
        if len(np.unique(items)) != len(items):
            raise ValueError("items must not repeat an id")
        y = np.asarray(y)
        if y.shape != items.shape:
            raise ValueError(f"y must hold one label per item ({len(items)}); got shape {y.shape}")
        self.classes_, labels = np.unique(y, return_inverse=True)
        if len(self.classes_) > MAX_CLASSES:
            raise ValueError(f"at most {MAX_CLASSES} classes; got {len(self.classes_)}")
        self.items_ = items
        self._labels = labels.astype(np.int64).ravel()
        n = len(items)
        self._weights = np.full(
            (self.n_runs, n, len(self.classes_)), 1.0 / (n * len(self.classes_))
        )
        self._run_seeds = check_random_state(self.random_state).randint(0, 2**31, self.n_runs)
        self.n_iter_, self.n_classifiers_ = 0, 0
        self.pair_keys_ = np.empty(0, np.int64)
        self.pair_votes_ = np.empty((0, 2, len(self.classes_)))
        self._answers = (np.empty(0, np.int64), np.zeros(1, np.int64)) + (
            np.empty(0, np.int32),
        ) * 3
        return self._boost_more(check_triplets(triplets), self.n_iter)

    def partial_fit(self, triplets, n_iter: int | None = None) -> TripletBoost:
        """Add answers and continue every run from the weights it reached (`n_iter`
        rounds each).

        Answers are kept as vote counts per query, so a later answer can overturn (or
        tie) an earlier majority."""
        self._validate_params()
        check_is_fitted(self, "classes_")
        return self._boost_more(check_triplets(triplets), n_iter or self.n_iter)

    @property
    def n_answers_(self) -> int:
        """Answers among training items held so far (repeats of a query included)."""
        return int(self._answers[4].sum())

    def _boost_more(self, triplets: np.ndarray, n_iter: int) -> TripletBoost:
        if len(triplets):
            local = np.full(max(self.items_.max(), triplets.max()) + 1, -1, np.int64)
            local[self.items_] = np.arange(len(self.items_))
            self._answers = _index_answers(self._answers, triplets, local, len(self.items_))
        if len(self._answers[2]) == 0:
            raise ValueError("no triplet has all three items among the training items")
        n, n_classes = self._weights.shape[1:]
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
        for run, seed in enumerate(self._run_seeds):
            _seed((int(seed) + self.n_iter_) % 2**32)
            _boost(
                n_iter,
                self._weights[run],
                self._labels,
                n_classes,
                *self._answers,
                trees,
                class_total,
                *out,
            )
            self._add_votes(*out)
        self.n_iter_ += n_iter
        return self

    def _add_votes(self, j, k, mask_j, mask_k, alpha) -> None:
        """Fold new rounds into one entry per reference pair (votes for "closer to the
        lower id" and "closer to the higher id", found by key through a hash table): a
        model holds O(pairs) whatever its rounds, so boosting on as answers arrive never
        grows it without bound."""
        spoke = (alpha != 0) & (k >= 0)
        keys, votes = _merge_pairs(
            self.items_[j[spoke]],
            self.items_[k[spoke]],
            mask_j[spoke],
            mask_k[spoke],
            alpha[spoke],
            len(self.classes_),
        )
        if len(self.pair_keys_):
            keys, row = np.unique(np.concatenate([self.pair_keys_, keys]), return_inverse=True)
            summed = np.zeros((len(keys), 2, len(self.classes_)))
            np.add.at(summed, row, np.concatenate([self.pair_votes_, votes]))
            votes = summed
        self.pair_keys_, self.pair_votes_ = keys, votes
        self._pair_table = _pair_table(keys)
        self.n_classifiers_ += int(spoke.sum())

    def _scores(self, triplets, items) -> tuple[np.ndarray, np.ndarray]:
        check_is_fitted(self, "pair_votes_")
        items = np.asarray(items, dtype=np.int64)
        if items.ndim != 1:
            raise ValueError("items must be a 1-d array of integer item ids")
        if len(np.unique(items)) != len(items):
            raise ValueError("items must not repeat an id")
        triplets = check_triplets(triplets)
        if triplets.max(initial=0) >= MAX_ITEMS or items.min(initial=0) < 0:
            raise ValueError(f"item ids must be in 0..{MAX_ITEMS - 1}")
        row_of_id = np.full(int(items.max(initial=-1)) + 1, -1, np.int64)
        row_of_id[items] = np.arange(len(items))
        scores = np.zeros((len(items), len(self.classes_)))
        support = np.zeros(len(items), np.int64)
        _score_items(
            triplets, row_of_id, len(items), self._pair_table, self.pair_votes_, scores, support
        )
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
        """Labels from the classifiers' weighted votes; None where no classifier spoke,
        and where two or more classes share the top vote (a tie is no label, whichever
        class sorts first)."""
        scores, support = self._scores(triplets, items)
        labels = self.classes_[np.argmax(scores, axis=1)]
        top = scores.max(axis=1, keepdims=True) if len(scores) else scores
        tied = np.isclose(scores, top, rtol=1e-12, atol=1e-12).sum(axis=1) > 1
        undecided = (support == 0) | tied
        if not np.any(undecided):
            return labels
        result = labels.astype(object)
        result[undecided] = None
        return result
