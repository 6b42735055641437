"""Stochastic steps for t-ETE's losses, for studies too large for full-batch descent.

One epoch visits every triplet once in a shuffled order and moves its three items at
once, each by a step that row-wise AdaGrad scales (the learning rate over the root of the
item's summed squared gradients): one pass over millions of answers moves each item a few
hundred times where a full-batch step moves it once, and the losses, whose gradients
differ in scale by orders of magnitude (STE's grows with distance, t-ETE's is bounded),
share one learning rate.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# The kernel code of SOE's loss (Terada & von Luxburg): no similarity kernel, a squared
# hinge on the distances, max(0, margin + |a - p| - |a - q|)², with t as the margin.
HINGE = 0.0
# The kernel code of t-STE as its authors (van der Maaten & Weinberger) and cblearn set
# it: a Student-t kernel with d - 1 degrees of freedom in d dimensions (at least one),
# whose tail thins as the dimension grows. As a tail of the t-exponential family that is
# k = 1 + 2/d, up to the embedding's scale (see `kernel_tail`).
DIMENSION_TAIL = -1.0


def kernel_tail(k: float, dims: int) -> float:
    """The kernel tail a loss uses in `dims` dimensions: `k` itself, or for
    DIMENSION_TAIL the tail of a Student-t kernel with max(dims - 1, 1) degrees of
    freedom: (1 + d/a)^(-(a+1)/2) is the t-exponential kernel of tail 1 + 2/(a+1) at
    a rescaled distance."""
    if k != DIMENSION_TAIL:
        return k
    return 1.0 + 2.0 / (max(dims - 1, 1) + 1)


@njit(cache=True, inline="always")
def squared_distances(Y, a, p, q, dims):
    """`dims` is Y's width; a literal 2 where the caller knows it, so the loop unrolls."""
    d_ap = 0.0
    d_aq = 0.0
    for j in range(dims):
        u = Y[a, j] - Y[p, j]
        v = Y[a, j] - Y[q, j]
        d_ap += u * u
        d_aq += v * v
    return d_ap, d_aq


@njit(cache=True, inline="always")
def _coefficients(d_ap, d_aq, t, k):
    """(loss, dL/dd_ap · 2, dL/dd_aq · 2) of one unit-weight triplet from its squared
    distances: the same losses as the full-batch passes, each in its cheapest form."""
    if k == 2.0:
        s_ap = 1.0 + d_ap
        s_aq = 1.0 + d_aq
        both = s_ap + s_aq
        if t == 1.0:
            return np.log(both / s_aq), 2.0 / both, -2.0 * s_ap / (both * s_aq)
        if t == 2.0:
            inverse = 1.0 / both
            factor = 2.0 * inverse * inverse
            return s_ap * inverse, factor * s_aq, -factor * s_ap
        one_plus = both / s_aq
        power = 1.0 / (one_plus * np.sqrt(one_plus)) if t == 1.5 else one_plus**-t
        c = (s_ap / s_aq) * power
        return (one_plus * power - 1.0) / (1.0 - t), 2.0 * c / s_ap, -2.0 * c / s_aq
    if k == 1.0 and t == 1.0:
        x = d_ap - d_aq
        e = np.exp(-abs(x))
        c = 1.0 / (1.0 + e) if x > 0.0 else e / (1.0 + e)
        return max(x, 0.0) + np.log1p(e), 2.0 * c, -2.0 * c
    if t == 1.0 and k > 1.0:
        ratio, s_ap, s_aq = tail_ratio(d_ap, d_aq, k)
        if ratio > RATIO_MOST:
            return np.log(s_ap / s_aq) / (k - 1.0), 2.0 / s_ap, -2.0 / s_aq
        c = ratio / (1.0 + ratio)
        return np.log1p(ratio), 2.0 * c / s_ap, -2.0 * c / s_aq
    if k == HINGE:
        near = np.sqrt(d_ap)
        far = np.sqrt(d_aq)
        slack = t + near - far
        if slack <= 0.0:
            return 0.0, 0.0, 0.0
        c = 2.0 * slack
        return slack * slack, c / max(near, 1e-12), -c / max(far, 1e-12)
    return tempered(d_ap, d_aq, t, k)


# Above this q_aq/q_ap, log(1 + ratio) is log(ratio) to the last bit, and a product of
# such factors could overflow.
RATIO_MOST = 1e100


@njit(cache=True, inline="always")
def tail_ratio(d_ap, d_aq, k):
    """For a kernel tail k > 1 (q = s^(-1/(k-1)) with s = 1 + (k-1)·d): q_aq/q_ap =
    (s_ap/s_aq)^(1/(k-1)), s_ap and s_aq. t-STE's loss with that kernel is log(1 + ratio),
    its slopes 2c/s_ap and -2c/s_aq with c = ratio/(1 + ratio). Where 2/(k-1) is whole, as
    for DIMENSION_TAIL (d/2), the power is products and at most one square root: a
    third of the cost of `tempered`'s logs and exponentials."""
    s_ap = 1.0 + (k - 1.0) * d_ap
    s_aq = 1.0 + (k - 1.0) * d_aq
    x = s_ap / s_aq
    halves = 2.0 / (k - 1.0)
    whole = np.floor(halves + 0.5)
    if abs(halves - whole) > 1e-9 or whole > 64.0:
        return x ** (1.0 / (k - 1.0)), s_ap, s_aq
    ratio = np.sqrt(x) if whole % 2.0 == 1.0 else 1.0
    for _ in range(int(whole) // 2):
        ratio *= x
    return ratio, s_ap, s_aq


@njit(cache=True, inline="always")
def tempered(d_ap, d_aq, t, k):
    """(loss, 2·dL/dd_ap, 2·dL/dd_aq) of the tempered loss with kernel tail k >= 1, for
    any t. Works in log space: log q = -log1p((k-1) d)/(k-1) (or -d at k = 1), and
    log(1 + l) by a stable softplus, so neither far pairs nor the Gaussian kernel
    overflow."""
    if k == 1.0:
        log_q_ap, log_q_aq = -d_ap, -d_aq
    else:
        log_q_ap = -np.log1p((k - 1.0) * d_ap) / (k - 1.0)
        log_q_aq = -np.log1p((k - 1.0) * d_aq) / (k - 1.0)
    log_ratio = log_q_aq - log_q_ap
    if log_ratio > 0.0:
        softplus = log_ratio + np.log1p(np.exp(-log_ratio))
    else:
        softplus = np.log1p(np.exp(log_ratio))
    loss = softplus if t == 1.0 else (np.exp((1.0 - t) * softplus) - 1.0) / (1.0 - t)
    # dL/dd_ap = c q_ap^(k-1), dL/dd_aq = -c q_aq^(k-1), with c = (1+l)^-t l
    c = np.exp(log_ratio - t * softplus)
    return loss, 2.0 * c * np.exp((k - 1.0) * log_q_ap), -2.0 * c * np.exp((k - 1.0) * log_q_aq)


# Rows are visited in blocks of this many, the blocks in a new random order each epoch:
# over triplets shuffled once, a row at a time in random order spent four fifths of an
# epoch waiting for memory.
BLOCK = 4096


@njit(cache=True, nogil=True, fastmath=True)
def sgd_epoch(Y, squared, triplets, weights, blocks, rate, t, k):
    """One pass over `triplets` (shuffled once by the caller), block by block in the
    order `blocks` (a permutation of range(ceil(m / BLOCK))), updating `Y` and the
    per-item AdaGrad sums `squared` in place; returns the mean loss met on the way."""
    dims = Y.shape[1]
    total = 0.0
    weight_sum = 0.0
    m = triplets.shape[0]
    for position in range(blocks.shape[0] * BLOCK):
        row = blocks[position // BLOCK] * BLOCK + position % BLOCK
        if row >= m:
            continue
        a, p, q = triplets[row, 0], triplets[row, 1], triplets[row, 2]
        w = weights[row]
        d_ap, d_aq = squared_distances(Y, a, p, q, dims)
        loss, g_ap, g_aq = _coefficients(d_ap, d_aq, t, k)
        total += w * loss
        weight_sum += w
        if g_ap == 0.0 and g_aq == 0.0:
            continue
        g_ap *= w
        g_aq *= w
        norm_a = 0.0
        norm_p = 0.0
        norm_q = 0.0
        for j in range(dims):
            u = Y[a, j] - Y[p, j]
            v = Y[a, j] - Y[q, j]
            g = g_ap * u + g_aq * v
            norm_a += g * g
            norm_p += g_ap * g_ap * u * u
            norm_q += g_aq * g_aq * v * v
        squared[a] += norm_a / dims
        squared[p] += norm_p / dims
        squared[q] += norm_q / dims
        step_a = rate / np.sqrt(squared[a] + 1e-12)
        step_p = rate / np.sqrt(squared[p] + 1e-12)
        step_q = rate / np.sqrt(squared[q] + 1e-12)
        for j in range(dims):
            u = Y[a, j] - Y[p, j]
            v = Y[a, j] - Y[q, j]
            Y[a, j] -= step_a * (g_ap * u + g_aq * v)
            Y[p, j] += step_p * g_ap * u
            Y[q, j] += step_q * g_aq * v
    return total / max(weight_sum, 1e-300)
