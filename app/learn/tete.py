"""t-ETE: triplet embedding with a tempered loss that caps what a wrong triplet can cost
(Amid, Vlassis & Warmuth; ALGORITHMS.md §3).

Each triplet ``(a, p, q)`` ("a is closer to p than to q") costs ``w · log_t(1 + q_aq/q_ap)``
with the similarity ``q_ab = exp_k(-||y_a - y_b||²)``. ``t = 1`` is the log loss of
t-STE; ``t = 2`` bounds every triplet's cost by 1, so reversed (noisy) triplets cannot
dominate. ``k`` (``kernel_t``) sets the kernel's tail: 2 is the Student-t kernel of t-STE
and of the paper; ``kernel_t="same"`` uses ``t`` for both, as the authors' code does.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from numba import njit
from sklearn.base import BaseEstimator
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from app.learn.metrics import triplet_error
from app.learn.triplets import check_triplets


def default_t(n_components: int) -> float:
    """The authors' default temperature for a given embedding dimension."""
    return min(1.45 + 1.1 / n_components, 2.0)


@njit(cache=True, inline="always")
def _squared_distances(Y, a, p, q):
    d_ap = 0.0
    d_aq = 0.0
    for j in range(Y.shape[1]):
        u = Y[a, j] - Y[p, j]
        v = Y[a, j] - Y[q, j]
        d_ap += u * u
        d_aq += v * v
    return d_ap, d_aq


@njit(cache=True, inline="always")
def _scatter(Y, gradient, a, p, q, g_ap, g_aq):
    """Add dL/dd_ap · ∂d_ap/∂y + dL/dd_aq · ∂d_aq/∂y (g already holds the factor 2)."""
    for j in range(Y.shape[1]):
        u = Y[a, j] - Y[p, j]
        v = Y[a, j] - Y[q, j]
        gradient[a, j] += g_ap * u + g_aq * v
        gradient[p, j] -= g_ap * u
        gradient[q, j] -= g_aq * v


@njit(cache=True, nogil=True)
def _loss_and_gradient(Y, triplets, weights, t, k, gradient, movable):
    """Total loss, and its gradient accumulated into `gradient` for rows with `movable`.

    Works in log space: log q = -log1p((k-1) d)/(k-1) (or -d at k = 1), and
    log(1 + l) by a stable softplus, so neither far pairs nor the Gaussian kernel overflow.
    """
    total = 0.0
    gradient[:] = 0.0
    for row in range(triplets.shape[0]):
        a, p, q = triplets[row, 0], triplets[row, 1], triplets[row, 2]
        if not (movable[a] or movable[p] or movable[q]):
            continue
        d_ap, d_aq = _squared_distances(Y, a, p, q)
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
        w = weights[row]
        if t == 1.0:
            total += w * softplus
        else:
            total += w * (np.exp((1.0 - t) * softplus) - 1.0) / (1.0 - t)
        # dL/dd_ap = c q_ap^(k-1), dL/dd_aq = -c q_aq^(k-1), with c = w (1+l)^-t l
        c = w * np.exp(log_ratio - t * softplus)
        g_ap = 2.0 * c * np.exp((k - 1.0) * log_q_ap)
        g_aq = -2.0 * c * np.exp((k - 1.0) * log_q_aq)
        _scatter(Y, gradient, a, p, q, g_ap, g_aq)
    return total


@njit(cache=True, nogil=True, fastmath=True)
def _loss_and_gradient_student(Y, triplets, weights, t, gradient, movable):
    """`_loss_and_gradient` for the Student-t kernel (k = 2), in 2-D or more: there
    q_aq/q_ap = (1 + d_ap)/(1 + d_aq) and q^(k-1) = q, so no logs or exps are needed for
    t = 1 or t = 2 and one of each otherwise. A pass over 1M triplets is the hot loop."""
    total = 0.0
    gradient[:] = 0.0
    for row in range(triplets.shape[0]):
        a, p, q = triplets[row, 0], triplets[row, 1], triplets[row, 2]
        if not (movable[a] or movable[p] or movable[q]):
            continue
        d_ap, d_aq = _squared_distances(Y, a, p, q)
        q_ap = 1.0 / (1.0 + d_ap)
        q_aq = 1.0 / (1.0 + d_aq)
        ratio = q_aq / q_ap
        one_plus = 1.0 + ratio
        w = weights[row]
        if t == 1.0:
            total += w * np.log(one_plus)
            c = w * ratio / one_plus
        elif t == 2.0:
            total += w * ratio / one_plus
            c = w * ratio / (one_plus * one_plus)
        else:
            log_one_plus = np.log(one_plus)
            total += w * (np.exp((1.0 - t) * log_one_plus) - 1.0) / (1.0 - t)
            c = w * ratio * np.exp(-t * log_one_plus)
        g_ap = 2.0 * c * q_ap
        g_aq = -2.0 * c * q_aq
        _scatter(Y, gradient, a, p, q, g_ap, g_aq)
    return total


def loss_and_gradient(Y, triplets, weights, t, k, gradient, movable) -> float:
    """Total loss; its gradient goes into `gradient` (rows with `movable` only)."""
    if k == 2.0:
        return _loss_and_gradient_student(Y, triplets, weights, t, gradient, movable)
    return _loss_and_gradient(Y, triplets, weights, t, k, gradient, movable)


def _descend(
    Y, triplets, weights, t, k, movable, max_iter, patience, tol, step_scale, callback=None
):
    """The authors' optimiser: full-batch steps of eta·n/m, eta ×1.01 after a step that
    lowered the loss and ×0.5 after one that did not; keeps the best embedding. Stops
    once the best loss improved by less than `tol` (relative) over the last 10 steps, or
    after `patience` steps in a row that did not lower it: converged. Returns the
    embedding, the loss curve and whether it converged before `max_iter` steps."""
    gradient = np.zeros_like(Y)
    movable_rows = movable.astype(np.bool_)
    eta = 2.0
    step = step_scale / max(len(triplets), 1)
    previous = np.inf
    best_loss, best_Y = np.inf, Y.copy()
    curve = []
    stale = 0
    best_before = []
    for _ in range(max_iter):
        loss = loss_and_gradient(Y, triplets, weights, t, k, gradient, movable_rows)
        curve.append(loss)
        if callback is not None:
            callback(len(curve), loss)
        if loss < best_loss:
            best_loss, best_Y = loss, Y.copy()
        best_before.append(best_loss)
        if len(best_before) > 10 and best_before[-11] - best_loss <= tol * abs(best_loss):
            return best_Y, np.array(curve), True
        if loss < previous:
            eta *= 1.01
            stale = 0
        else:
            eta *= 0.5
            stale += 1
            if stale >= patience:
                return best_Y, np.array(curve), True
        previous = loss
        Y -= (eta * step) * gradient * movable[:, None]
    return best_Y, np.array(curve), False


def _lbfgs(Y, triplets, weights, t, k, movable, max_iter, callback=None):
    """L-BFGS on the same loss: fewer, better steps than the fixed rule."""
    from scipy.optimize import minimize

    shape = Y.shape
    rows = movable.astype(np.bool_)
    gradient = np.zeros_like(Y)
    curve = []

    def objective(flat):
        loss = loss_and_gradient(flat.reshape(shape), triplets, weights, t, k, gradient, rows)
        curve.append(loss)
        if callback is not None:
            callback(len(curve), loss)
        return loss, (gradient * movable[:, None]).ravel()

    result = minimize(
        objective, Y.ravel(), jac=True, method="L-BFGS-B", options={"maxiter": max_iter}
    )
    return result.x.reshape(shape), np.array(curve), bool(result.success)


OPTIMIZERS = ("gd", "lbfgs")


def _check_fit_params(
    n_components, t, kernel_t, max_iter, patience, optimizer="gd", tol=0.0
) -> None:
    if optimizer not in OPTIMIZERS:
        raise ValueError(
            f"optimizer must be 'gd' (the authors' rule) or 'lbfgs'; got {optimizer!r}"
        )
    if not isinstance(n_components, Integral) or n_components < 1:
        raise ValueError(f"n_components must be a positive integer; got {n_components!r}")
    if t is not None and (not isinstance(t, Real) or not 1 <= t <= 3):
        raise ValueError(f"t must be a number in [1, 3] or None (the authors' default); got {t!r}")
    if kernel_t != "same" and (not isinstance(kernel_t, Real) or not 1 <= kernel_t <= 3):
        raise ValueError(f"kernel_t must be a number in [1, 3] or 'same'; got {kernel_t!r}")
    if not isinstance(max_iter, Integral) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer; got {max_iter!r}")
    if not isinstance(patience, Integral) or patience < 1:
        raise ValueError(f"patience must be a positive integer; got {patience!r}")
    if not isinstance(tol, Real) or not tol >= 0:
        raise ValueError(f"tol must be a non-negative number; got {tol!r}")


class TETE(BaseEstimator):
    """t-Exponential Triplet Embedding.

    Parameters
    ----------
    n_components : dimension of the embedding.
    t : loss temperature; None is the authors' ``min(1.45 + 1.1/n_components, 2)``;
        1 is t-STE.
    kernel_t : tail of the similarity kernel: 2 (Student-t, default) or "same" as ``t``.
    max_iter, patience, tol : at most `max_iter` full-batch steps; stop after `patience`
        steps that did not lower the loss, or once the best loss improved by less than
        `tol` (relative) over 10 steps (0 runs all `max_iter` steps).
    optimizer : "gd", the authors' full-batch gradient descent with their adaptive step
        (default), or "lbfgs" (scipy's L-BFGS on the same loss and gradient).
    init_scale : standard deviation of the initial Gaussian embedding (the authors: 1e-4;
        L-BFGS does better from 1, as cblearn starts).
    random_state : seed of the initial embedding.

    Attributes
    ----------
    embedding_ : (n_items, n_components) array.
    loss_curve_ : training loss at each step.
    n_iter_ : steps taken.
    converged_ : whether the fit stopped because the loss settled (False: it ran out of
        `max_iter` steps while still improving).
    """

    def __init__(
        self,
        n_components: int = 2,
        t: float | None = None,
        kernel_t=2.0,
        max_iter: int = 1000,
        patience: int = 100,
        tol: float = 1e-5,
        optimizer: str = "gd",
        init_scale: float = 1.0,
        random_state=None,
    ) -> None:
        self.n_components = n_components
        self.t = t
        self.kernel_t = kernel_t
        self.max_iter = max_iter
        self.patience = patience
        self.tol = tol
        self.optimizer = optimizer
        self.init_scale = init_scale
        self.random_state = random_state

    def _optimise(self, Y, triplets, weights, movable, step_scale, callback=None):
        t, k = self._temperatures()
        if self.optimizer == "lbfgs":
            return _lbfgs(Y, triplets, weights, t, k, movable, self.max_iter, callback)
        return _descend(
            Y,
            triplets,
            weights,
            t,
            k,
            movable,
            self.max_iter,
            self.patience,
            self.tol,
            step_scale,
            callback,
        )

    def _temperatures(self) -> tuple[float, float]:
        t = default_t(self.n_components) if self.t is None else float(self.t)
        return t, (t if self.kernel_t == "same" else float(self.kernel_t))

    def fit(
        self, triplets, n_items: int | None = None, sample_weight=None, init=None, callback=None
    ) -> TETE:
        """Embed items ``0..n_items-1`` so that the triplets hold as far as possible.

        `init` warm-starts from a given (n_items, n_components) embedding, e.g. the last
        fit's with rows for new items; `callback(step, loss)` is called after every step
        (to report progress; an exception it raises stops the fit)."""
        _check_fit_params(
            self.n_components,
            self.t,
            self.kernel_t,
            self.max_iter,
            self.patience,
            self.optimizer,
            self.tol,
        )
        triplets = check_triplets(triplets, n_items)
        if len(triplets) == 0:
            raise ValueError("triplets is empty")
        n = int(triplets.max()) + 1 if n_items is None else int(n_items)
        weights = _check_weights(sample_weight, len(triplets))
        rng = check_random_state(self.random_state)
        if not isinstance(self.init_scale, Real) or self.init_scale <= 0:
            raise ValueError(f"init_scale must be positive; got {self.init_scale!r}")
        if init is None:
            Y = rng.standard_normal((n, self.n_components)) * self.init_scale
        else:
            Y = np.array(init, dtype=np.float64)
            if Y.shape != (n, self.n_components):
                raise ValueError(
                    f"init must have shape ({n}, {self.n_components}); got {Y.shape}"
                )
            if not np.all(np.isfinite(Y)):
                raise ValueError("init must be finite")
        self.embedding_, self.loss_curve_, self.converged_ = self._optimise(
            Y, triplets, weights, np.ones(n), float(n), callback
        )
        self.n_iter_ = len(self.loss_curve_)
        return self

    def fit_transform(self, triplets, n_items: int | None = None, sample_weight=None):
        return self.fit(triplets, n_items, sample_weight).embedding_

    def place(self, triplets, n_new: int, sample_weight=None) -> np.ndarray:
        """Coordinates for `n_new` new items, ids ``n_items..n_items+n_new-1``, from their
        triplets with the fitted items; the fitted embedding stays as it is."""
        check_is_fitted(self, "embedding_")
        n = len(self.embedding_)
        triplets = check_triplets(triplets, n + n_new)
        weights = _check_weights(sample_weight, len(triplets))
        # Start each new item where the items it was judged closer to are.
        Y = np.vstack([self.embedding_, np.zeros((n_new, self.n_components))])
        new_anchor = triplets[:, 0] >= n
        for new in range(n, n + n_new):
            closer = triplets[new_anchor & (triplets[:, 0] == new), 1]
            closer = closer[closer < n]
            if len(closer):
                Y[new] = self.embedding_[closer].mean(axis=0)
        movable = np.zeros(n + n_new)
        movable[n:] = 1.0
        placed, _, _ = self._optimise(Y, triplets, weights, movable, float(max(n_new, 1)))
        return placed[n:]

    def score(self, triplets) -> float:
        """Share of `triplets` the embedding satisfies."""
        check_is_fitted(self, "embedding_")
        return 1.0 - triplet_error(self.embedding_, triplets)


def _check_weights(sample_weight, n_triplets: int) -> np.ndarray:
    if sample_weight is None:
        return np.ones(n_triplets)
    weights = np.asarray(sample_weight, dtype=np.float64)
    if weights.shape != (n_triplets,):
        raise ValueError(
            f"sample_weight must have one weight per triplet ({n_triplets}); "
            f"got shape {weights.shape}"
        )
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("sample_weight must be finite and non-negative")
    return weights


def feature_triplets(
    X, n_inliers: int = 10, n_outliers: int = 5, gamma: float = 0.01, random_state=None
) -> tuple[np.ndarray, np.ndarray]:
    """Informative weighted triplets for embedding items that have features (weighted t-ETE).

    For each item a: each of its `n_inliers` nearest neighbours p, with `n_outliers` items
    q drawn uniformly among those farther from a than p. Each triplet is weighted by the
    inverse of its loss ratio in feature space, ``s_ap / s_aq`` with
    ``s_ab = exp(-||x_a - x_b||² / (σ_a σ_b))`` and σ the distance to a near neighbour,
    then scaled to at most 1 and lifted by `gamma`.
    """
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    if X.ndim != 2 or n < n_inliers + 2:
        raise ValueError(f"X must be 2-d with more than n_inliers + 1 = {n_inliers + 1} rows")
    rng = check_random_state(random_state)
    neighbours = NearestNeighbors(n_neighbors=min(n, n_inliers + 1)).fit(X)
    distances, indices = neighbours.kneighbors(X)
    sigma = np.maximum(distances[:, min(5, distances.shape[1] - 1)], 1e-12)
    anchor = np.repeat(np.arange(n), n_inliers * n_outliers)
    inlier = np.repeat(indices[:, 1 : n_inliers + 1], n_outliers, axis=1).ravel()
    squared = lambda a, b: np.einsum("ij,ij->i", X[a] - X[b], X[a] - X[b])  # noqa: E731
    d_ap = squared(anchor, inlier)
    outlier = rng.randint(0, n, size=len(anchor))
    # Redraw outliers that are not farther than the inlier (few rounds suffice).
    for _ in range(20):
        bad = (squared(anchor, outlier) <= d_ap) | (outlier == anchor)
        if not bad.any():
            break
        outlier[bad] = rng.randint(0, n, size=int(bad.sum()))
    keep = (squared(anchor, outlier) > d_ap) & (outlier != anchor)
    anchor, inlier, outlier, d_ap = anchor[keep], inlier[keep], outlier[keep], d_ap[keep]
    d_aq = squared(anchor, outlier)
    log_weight = -d_ap / (sigma[anchor] * sigma[inlier]) + d_aq / (sigma[anchor] * sigma[outlier])
    weights = np.exp(log_weight - log_weight.max()) + gamma
    return np.stack([anchor, inlier, outlier], axis=1), weights
