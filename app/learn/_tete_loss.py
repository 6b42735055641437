"""t-ETE's losses, their gradients and the optimisers that descend them: what a fit
computes, below both the estimator (tete.py) and its choice at scale (_tete_scale.py).

Each triplet ``(a, p, q)`` costs ``w · log_t(1 + q_aq/q_ap)`` with the similarity
``q_ab = exp_k(-||y_a - y_b||²)`` (see tete.py); SOE's hinge and STE's Gaussian kernel are
here too.
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from app.learn._tete_sgd import (
    HINGE,
    RATIO_MOST,
    kernel_tail,
    squared_distances,
    tail_ratio,
    tempered,
)

# After the first fold a candidate is not tried on the others when it is PRUNE_MARGIN
# behind the best there, or more than DIMENSION_TOLERANCE behind and PRUNE_Z paired
# standard errors worse on the same held-out answers; the folds stop where one is left.
PRUNE_MARGIN = 0.01
PRUNE_Z = 2.0
# A smaller dimension this close to the best is as good (when the folds' own spread is
# smaller still: three folds can agree to a tenth of a point).
DIMENSION_TOLERANCE = 0.002


def default_t(n_components: int) -> float:
    """The authors' default temperature for a given embedding dimension."""
    return min(1.45 + 1.1 / n_components, 2.0)


@njit(cache=True, inline="always")
def _scatter(Y, gradient, a, p, q, g_ap, g_aq, dims):
    """Add dL/dd_ap · ∂d_ap/∂y + dL/dd_aq · ∂d_aq/∂y (g already holds the factor 2)."""
    for j in range(dims):
        u = Y[a, j] - Y[p, j]
        v = Y[a, j] - Y[q, j]
        gradient[a, j] += g_ap * u + g_aq * v
        gradient[p, j] -= g_ap * u
        gradient[q, j] -= g_aq * v


@njit(cache=True, nogil=True)
def _loss_and_gradient(Y, triplets, weights, t, k, gradient, movable):
    """Total loss of the tempered loss with kernel tail k (any k >= 1), and its gradient
    into `gradient` for rows with `movable`."""
    gradient[:] = 0.0
    return _tempered_rows(
        Y, triplets, weights, t, k, gradient, movable, np.int64(0), triplets.shape[0]
    )


@njit(cache=True, nogil=True)
def _tempered_rows(Y, triplets, weights, t, k, gradient, movable, start, stop):
    """Total loss, and its gradient accumulated into `gradient` for rows with `movable`."""
    total = 0.0
    for row in range(start, stop):
        a, p, q = triplets[row, 0], triplets[row, 1], triplets[row, 2]
        if not (movable[a] or movable[p] or movable[q]):
            continue
        d_ap, d_aq = squared_distances(Y, a, p, q, Y.shape[1])
        w = weights[row]
        loss, g_ap, g_aq = tempered(d_ap, d_aq, t, k)
        total += w * loss
        _scatter(Y, gradient, a, p, q, w * g_ap, w * g_aq, Y.shape[1])
    return total


# Sums of log(x) over rows of unit weight are taken as the log of their running product,
# one log per LOG_BATCH_ABOVE of product instead of one per row (a log costs as much as
# the rest of a row); every factor is >= 1 and finite, so the product cannot underflow.
LOG_BATCH_ABOVE = 1e200


@njit(cache=True, inline="always")
def _add_log(total, product, factor):
    """(total, product) with log(factor) added through the running product."""
    product *= factor
    if product > LOG_BATCH_ABOVE:
        return total + np.log(product), 1.0
    return total, product


@njit(cache=True, inline="always", fastmath=True)
def _student_rows(Y, triplets, weights, t, gradient, movable, start, stop, dims):
    """`_loss_and_gradient` for the Student-t kernel (k = 2) over rows start..stop: with
    s = 1 + d, q_aq/q_ap = s_ap/s_aq and q^(k-1) = 1/s, so t = 1 needs one log (batched
    as above), t = 2 none, t = 1.5 a square root, other t one power. This is the hot loop."""
    total = 0.0
    product = 1.0
    for row in range(start, stop):
        a, p, q = triplets[row, 0], triplets[row, 1], triplets[row, 2]
        if not (movable[a] or movable[p] or movable[q]):
            continue
        d_ap, d_aq = squared_distances(Y, a, p, q, dims)
        s_ap = 1.0 + d_ap
        s_aq = 1.0 + d_aq
        both = s_ap + s_aq  # 1 + q_aq/q_ap = both/s_aq
        w = weights[row]
        if t == 2.0:
            # loss s_ap/both; c = w·ratio/(1+ratio)² = w s_ap s_aq/both²; g = 2c/s
            inverse = 1.0 / both
            total += w * s_ap * inverse
            factor = 2.0 * w * inverse * inverse
            g_ap = factor * s_aq
            g_aq = -factor * s_ap
        elif t == 1.0:
            # loss log(both/s_aq); c = w s_ap/both
            inverse = 1.0 / (both * s_aq)
            if w == 1.0:
                total, product = _add_log(total, product, both * both * inverse)
            else:
                total += w * np.log(both * both * inverse)
            g_ap = 2.0 * w * s_aq * inverse
            g_aq = -2.0 * w * s_ap * inverse
        else:
            one_plus = both / s_aq
            # (1 + l)^-t, and (1 + l)^(1-t) = (1 + l)·that
            tempered = 1.0 / (one_plus * np.sqrt(one_plus)) if t == 1.5 else one_plus**-t
            total += w * (one_plus * tempered - 1.0) / (1.0 - t)
            c = w * (s_ap / s_aq) * tempered
            g_ap = 2.0 * c / s_ap
            g_aq = -2.0 * c / s_aq
        _scatter(Y, gradient, a, p, q, g_ap, g_aq, dims)
    return total + np.log(product)


SOE_MARGIN = 0.1


@njit(cache=True, inline="always", fastmath=True)
def _hinge_rows(Y, triplets, weights, margin, gradient, movable, start, stop, dims):
    total = 0.0
    for row in range(start, stop):
        a, p, q = triplets[row, 0], triplets[row, 1], triplets[row, 2]
        if not (movable[a] or movable[p] or movable[q]):
            continue
        d_ap, d_aq = squared_distances(Y, a, p, q, dims)
        near = np.sqrt(d_ap)
        far = np.sqrt(d_aq)
        slack = margin + near - far
        if slack <= 0.0:
            continue
        w = weights[row]
        total += w * slack * slack
        # dL/dd = 2 w slack · d(sqrt d)/dd = w slack / sqrt d, for d the squared distance
        c = 2.0 * w * slack
        _scatter(Y, gradient, a, p, q, c / max(near, 1e-12), -c / max(far, 1e-12), dims)
    return total


@njit(cache=True, inline="always", fastmath=True)
def _gaussian_rows(Y, triplets, weights, gradient, movable, start, stop, dims):
    """STE (Gaussian kernel, t = 1): log(1 + e^x) of x = d_ap - d_aq and its slope, the
    logistic of x, from one exponential of -|x| (at most 1: nothing overflows); the logs
    of 1 + e^-|x| batched as above."""
    total = 0.0
    product = 1.0
    for row in range(start, stop):
        a, p, q = triplets[row, 0], triplets[row, 1], triplets[row, 2]
        if not (movable[a] or movable[p] or movable[q]):
            continue
        d_ap, d_aq = squared_distances(Y, a, p, q, dims)
        w = weights[row]
        x = d_ap - d_aq
        e = np.exp(-abs(x))
        if w == 1.0:
            total += max(x, 0.0)
            total, product = _add_log(total, product, 1.0 + e)
        else:
            total += w * (max(x, 0.0) + np.log1p(e))
        c = w / (1.0 + e) if x > 0.0 else w * e / (1.0 + e)
        _scatter(Y, gradient, a, p, q, 2.0 * c, -2.0 * c, dims)
    return total + np.log(product)


@njit(cache=True, inline="always", fastmath=True)
def _tail_rows(Y, triplets, weights, k, gradient, movable, start, stop, dims):
    """t-STE (t = 1) with a kernel tail k > 1 other than 2 (t-STE(d-1)): the logs of
    1 + q_aq/q_ap batched as above."""
    total = 0.0
    product = 1.0
    for row in range(start, stop):
        a, p, q = triplets[row, 0], triplets[row, 1], triplets[row, 2]
        if not (movable[a] or movable[p] or movable[q]):
            continue
        d_ap, d_aq = squared_distances(Y, a, p, q, dims)
        ratio, s_ap, s_aq = tail_ratio(d_ap, d_aq, k)
        w = weights[row]
        if ratio > RATIO_MOST:
            total += w * np.log(s_ap / s_aq) / (k - 1.0)
            c = w
        else:
            if w == 1.0:
                total, product = _add_log(total, product, 1.0 + ratio)
            else:
                total += w * np.log1p(ratio)
            c = w * ratio / (1.0 + ratio)
        _scatter(Y, gradient, a, p, q, 2.0 * c / s_ap, -2.0 * c / s_aq, dims)
    return total + np.log(product)


@njit(cache=True, inline="always")
def _rows_of_width(Y, triplets, weights, t, k, gradient, movable, start, stop, dims):
    if k == 2.0:
        return _student_rows(Y, triplets, weights, t, gradient, movable, start, stop, dims)
    if k == 1.0 and t == 1.0:
        return _gaussian_rows(Y, triplets, weights, gradient, movable, start, stop, dims)
    if k == HINGE:
        return _hinge_rows(Y, triplets, weights, t, gradient, movable, start, stop, dims)
    if t == 1.0 and k > 1.0:
        return _tail_rows(Y, triplets, weights, k, gradient, movable, start, stop, dims)
    return _tempered_rows(Y, triplets, weights, t, k, gradient, movable, start, stop)


@njit(cache=True, nogil=True)
def _rows(Y, triplets, weights, t, k, gradient, movable, start, stop):
    # 2-D, the default, gets its own copy of the passes with the width a constant (the
    # inner loops unroll): a third to a half faster than the same code for any width.
    if Y.shape[1] == 2:
        return _rows_of_width(Y, triplets, weights, t, k, gradient, movable, start, stop, 2)
    return _rows_of_width(Y, triplets, weights, t, k, gradient, movable, start, stop, Y.shape[1])


@njit(cache=True, nogil=True)
def _serial(Y, triplets, weights, t, k, gradient, movable):
    gradient[:] = 0.0
    # np.int64(0), not 0: a literal would make numba compile a second copy of the passes
    # (~10 s on a cold cache) beside the one _parallel calls with a variable start.
    return _rows(Y, triplets, weights, t, k, gradient, movable, np.int64(0), triplets.shape[0])


@njit(cache=True, nogil=True, parallel=True)
def _parallel(Y, triplets, weights, t, k, gradient, movable, chunks):
    """The same over `chunks` slices of the triplets at once, each into a gradient of
    its own, added up in a fixed order (the same result for the same number of chunks)."""
    m = triplets.shape[0]
    size = (m + chunks - 1) // chunks
    partial = np.zeros((chunks, Y.shape[0], Y.shape[1]))
    totals = np.zeros(chunks)
    for chunk in prange(chunks):
        start = min(chunk * size, m)
        stop = min(start + size, m)
        totals[chunk] = _rows(Y, triplets, weights, t, k, partial[chunk], movable, start, stop)
    gradient[:] = 0.0
    for chunk in range(chunks):
        gradient += partial[chunk]
    return totals.sum()


# Below this many triplets a pass is too short for threads to pay.
PARALLEL_FROM = 20_000
# A candidate's fit in a fold (ranking only) stops after this many steps: on planted
# answers under both noise models the choice came out the same (errors within 0.0003)
# for half the gradient passes where SOE or t-STE crept on to max_iter.
QUICK_MAX_ITER = 250


def loss_and_gradient(Y, triplets, weights, t, k, gradient, movable, threads=True) -> float:
    """Total loss; its gradient goes into `gradient` (rows with `movable` only). k is
    the kernel's tail (2: Student-t, 1: Gaussian) or HINGE (SOE's loss, margin t).
    `threads=False` keeps to the calling thread (see TETE.place)."""
    k = kernel_tail(k, Y.shape[1])
    chunks = get_num_threads()
    if threads and chunks > 1 and len(triplets) >= PARALLEL_FROM:
        return _parallel(Y, triplets, weights, t, k, gradient, movable, chunks)
    return _serial(Y, triplets, weights, t, k, gradient, movable)


@njit(cache=True, nogil=True)
def _violations(Y, triplets):
    """Per triplet: 1 where the embedding contradicts it, 0.5 on a tie, 0 else."""
    wrong = np.zeros(triplets.shape[0])
    for row in range(triplets.shape[0]):
        d_ap, d_aq = squared_distances(
            Y, triplets[row, 0], triplets[row, 1], triplets[row, 2], Y.shape[1]
        )
        if d_ap > d_aq:
            wrong[row] = 1.0
        elif d_ap == d_aq:
            wrong[row] = 0.5
    return wrong


@njit(cache=True, nogil=True)
def _violated_share(Y, triplets):
    """triplet_error without the checks: the stopping rule's measure."""
    return _violations(Y, triplets).sum() / max(triplets.shape[0], 1)


# The error-based stopping rule looks every CHECK_EVERY steps, on at most CHECK_ROWS
# triplets (evenly strided), and wants the error down by ERROR_TOL to count as progress.
CHECK_EVERY = 10
CHECK_ROWS = 200_000
ERROR_TOL = 1e-4
# The loss-based rule stops only with the loss within this share of its best.
RECOVERED = 0.01


def _descend(
    Y,
    triplets,
    weights,
    t,
    k,
    movable,
    max_iter,
    patience,
    tol,
    step_scale,
    callback=None,
    n_iter_no_change=None,
    watch=None,
    threads=True,
    keep_lowest_error=False,
):
    """The authors' optimiser: full-batch steps of eta·n/m, eta ×1.01 after a step that
    lowered the loss and ×0.5 after one that did not; keeps the best embedding. Stops
    (converged) once the best loss improved by less than `tol` (relative) over the last
    10 steps, after `patience` steps in a row that did not lower it, or once the triplet
    error on `watch` (the training triplets unless given) has not fallen by ERROR_TOL in
    `n_iter_no_change` steps: on human answers the loss creeps down long after the
    ordering it encodes has settled. Returns the embedding, the loss curve and whether it
    converged before `max_iter` steps. `keep_lowest_error`: return the embedding with the
    lowest error on `watch` instead (held-out answers: the step where it stopped
    generalising), and the curve up to it."""
    gradient = np.zeros_like(Y)
    movable_rows = movable.astype(np.bool_)
    eta = 2.0
    step = step_scale / max(len(triplets), 1)
    previous = np.inf
    best_loss, best_Y = np.inf, Y.copy()
    curve = []
    stale = 0
    best_before = []
    best_error_step = 0
    if n_iter_no_change:
        watch = triplets if watch is None else watch
        watch = watch[:: max(1, len(watch) // CHECK_ROWS)]
        best_error, best_error_step = np.inf, 0
        if keep_lowest_error:
            best_error, best_Y = _violated_share(Y, watch), Y.copy()
    for _ in range(max_iter):
        loss = loss_and_gradient(Y, triplets, weights, t, k, gradient, movable_rows, threads)
        curve.append(loss)
        if callback is not None:
            callback(len(curve), loss)
        if loss < best_loss:
            best_loss = loss
            if not keep_lowest_error:
                best_Y = Y.copy()
        best_before.append(best_loss)
        # Not while the loss is still far above its best: a step too long for a loss that
        # grows with distance (SOE's hinge) throws it up for a few steps while eta halves.
        settled = len(curve) > 10 and best_before[-11] - best_loss <= tol * abs(best_loss)
        if settled and loss - best_loss <= RECOVERED * abs(best_loss):
            return (*_kept(best_Y, curve, best_error_step, keep_lowest_error), True)
        if n_iter_no_change and len(curve) % CHECK_EVERY == 0:
            error = _violated_share(Y, watch)
            if error < best_error - ERROR_TOL:
                best_error, best_error_step = error, len(curve)
                if keep_lowest_error:
                    best_Y = Y.copy()
            elif len(curve) - best_error_step >= n_iter_no_change:
                return (*_kept(best_Y, curve, best_error_step, keep_lowest_error), True)
        if loss < previous:
            eta *= 1.01
            stale = 0
        else:
            eta *= 0.5
            stale += 1
            if stale >= patience:
                return (*_kept(best_Y, curve, best_error_step, keep_lowest_error), True)
        previous = loss
        Y -= (eta * step) * gradient * movable[:, None]
    return (*_kept(best_Y, curve, best_error_step, keep_lowest_error), False)


def _kept(Y, curve, best_error_step, keep_lowest_error):
    """The kept embedding and its curve (cut at the kept step where that is the one with
    the lowest watched error)."""
    return Y, np.array(curve[:best_error_step] if keep_lowest_error else curve)


def _lbfgs(Y, triplets, weights, t, k, movable, max_iter, callback=None, threads=True):
    """L-BFGS on the same loss: fewer, better steps than the fixed rule."""
    from scipy.optimize import minimize

    shape = Y.shape
    rows = movable.astype(np.bool_)
    gradient = np.zeros_like(Y)
    curve = []

    def objective(flat):
        loss = loss_and_gradient(
            flat.reshape(shape), triplets, weights, t, k, gradient, rows, threads
        )
        curve.append(loss)
        if callback is not None:
            callback(len(curve), loss)
        return loss, (gradient * movable[:, None]).ravel()

    result = minimize(
        objective, Y.ravel(), jac=True, method="L-BFGS-B", options={"maxiter": max_iter}
    )
    return result.x.reshape(shape), np.array(curve), bool(result.success)
