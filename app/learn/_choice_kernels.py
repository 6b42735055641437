"""numba kernels of the choice model (app/learn/choice.py): a stochastic pass over the
choices, the full loss and its gradient, and the probabilities of every alternative.

An alternative's score is the similarity of its pair: the dot product of the two rows
(SPoSE's form, on a non-negative embedding) or the log of a Student-t kernel of their
distance (t-STE's form); a choice's probabilities are the softmax of its scores, so the
kernel's are proportional to the kernel itself, as in t-STE's triplet probability.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# Adam's moments' decay, and the floor of its step's denominator.
_BETA1, _BETA2, _EPSILON = 0.9, 0.999, 1e-8


@njit(cache=True, inline="always")
def _score(X, u, v, kernel, alpha):
    total = 0.0
    if kernel:
        for j in range(X.shape[1]):
            difference = X[u, j] - X[v, j]
            total += difference * difference
        return -0.5 * (alpha + 1.0) * np.log1p(total / alpha), total
    for j in range(X.shape[1]):
        total += X[u, j] * X[v, j]
    return total, 0.0


@njit(cache=True, inline="always")
def _choice_weights(X, pairs, row, alternatives, kernel, alpha, weights, distances):
    """One choice's log loss; `weights` then holds each alternative's dLoss/dscore (its
    probability, less 1 for the one chosen) and `distances` its pair's squared distance
    (the kernel form's)."""
    best = -np.inf
    for a in range(alternatives):
        weights[a], distances[a] = _score(X, pairs[row, a, 0], pairs[row, a, 1], kernel, alpha)
        best = max(best, weights[a])
    norm = 0.0
    for a in range(alternatives):
        norm += np.exp(weights[a] - best)
    loss = best + np.log(norm) - weights[0]
    for a in range(alternatives):
        weights[a] = np.exp(weights[a] - best) / norm - (1.0 if a == 0 else 0.0)
    return loss


@njit(cache=True, inline="always")
def _add_pair_gradient(X, u, v, weight, distance, kernel, alpha, G, into_u, into_v):
    """Add one pair's share of the gradient to rows `into_u` and `into_v` of G (the items'
    own rows, or a buffer's)."""
    if kernel:
        pull = -(alpha + 1.0) / (alpha + distance) * weight
        for j in range(X.shape[1]):
            step = pull * (X[u, j] - X[v, j])
            G[into_u, j] += step
            G[into_v, j] -= step
    else:
        for j in range(X.shape[1]):
            G[into_u, j] += weight * X[v, j]
            G[into_v, j] += weight * X[u, j]


@njit(cache=True, parallel=True)
def probabilities(X, pairs, widths, kernel, alpha):
    """Each alternative's probability of being chosen (0 past a choice's width)."""
    count, width = pairs.shape[0], pairs.shape[1]
    out = np.zeros((count, width))
    for row in prange(count):
        alternatives = widths[row]
        best = -np.inf
        for a in range(alternatives):
            score, _ = _score(X, pairs[row, a, 0], pairs[row, a, 1], kernel, alpha)
            out[row, a] = score
            best = max(best, score)
        norm = 0.0
        for a in range(alternatives):
            out[row, a] = np.exp(out[row, a] - best)
            norm += out[row, a]
        for a in range(alternatives):
            out[row, a] /= norm
    return out


@njit(cache=True, parallel=True)
def loss_and_gradient(X, pairs, widths, kernel, alpha, chunks):
    """The summed log loss of the choices and its gradient, over `chunks` runs of the
    choices in threads (each its own gradient, added up at the end: the same sum however
    the threads are scheduled)."""
    count, width = pairs.shape[0], pairs.shape[1]
    n, dims = X.shape
    gradients = np.zeros((chunks, n, dims))
    losses = np.zeros(chunks)
    size = (count + chunks - 1) // chunks
    for chunk in prange(chunks):
        weights = np.empty(width)
        distances = np.empty(width)
        G = gradients[chunk]
        for row in range(chunk * size, min(count, (chunk + 1) * size)):
            alternatives = widths[row]
            losses[chunk] += _choice_weights(
                X, pairs, row, alternatives, kernel, alpha, weights, distances
            )
            for a in range(alternatives):
                u, v = pairs[row, a, 0], pairs[row, a, 1]
                _add_pair_gradient(X, u, v, weights[a], distances[a], kernel, alpha, G, u, v)
    total = gradients[0].copy()
    for chunk in range(1, chunks):
        total += gradients[chunk]
    return losses.sum(), total


@njit(cache=True)
def adam_epoch(X, pairs, widths, order, rate, first, second, steps, penalty, kernel, alpha):
    """One pass over the choices in `order`, each moving its items at once, each item by
    its own Adam (lazy: an item's moments move only when it is in a choice; `steps`
    counts its updates for the bias terms). The dot form adds each item's share of the
    L1 penalty per appearance (`penalty`) and stays non-negative. Returns the mean log
    loss of the choices as they were met."""
    dims = X.shape[1]
    width = pairs.shape[1]
    weights = np.empty(width)
    distances = np.empty(width)
    items = np.empty(2 * width, dtype=np.int64)
    gradient = np.zeros((2 * width, dims))
    total = 0.0
    for row in order:
        alternatives = widths[row]
        total += _choice_weights(X, pairs, row, alternatives, kernel, alpha, weights, distances)
        # Each item of the choice once, with its gradient (an item may stand in several
        # pairs: the reference of a rank screen is in all of them).
        found = 0
        for a in range(alternatives):
            u, v = pairs[row, a, 0], pairs[row, a, 1]
            slot_u, slot_v = -1, -1
            for s in range(found):
                if items[s] == u:
                    slot_u = s
                if items[s] == v:
                    slot_v = s
            if slot_u < 0:
                slot_u = found
                items[found] = u
                gradient[found, :] = 0.0
                found += 1
            if slot_v < 0:
                slot_v = found
                items[found] = v
                gradient[found, :] = 0.0
                found += 1
            _add_pair_gradient(
                X, u, v, weights[a], distances[a], kernel, alpha, gradient, slot_u, slot_v
            )
        for s in range(found):
            item = items[s]
            steps[item] += 1
            fix1 = 1.0 - _BETA1 ** steps[item]
            fix2 = 1.0 - _BETA2 ** steps[item]
            for j in range(dims):
                g = gradient[s, j] + penalty[item]
                first[item, j] = _BETA1 * first[item, j] + (1 - _BETA1) * g
                second[item, j] = _BETA2 * second[item, j] + (1 - _BETA2) * g * g
                moved = X[item, j] - rate * (first[item, j] / fix1) / (
                    np.sqrt(second[item, j] / fix2) + _EPSILON
                )
                X[item, j] = moved if kernel else max(0.0, moved)
    return total / max(len(order), 1)
