"""t-ETE: triplet embedding with a tempered loss that caps what a wrong triplet can cost
(Amid, Vlassis & Warmuth; ALGORITHMS.md §3).

Each triplet ``(a, p, q)`` ("a is closer to p than to q") costs ``w · log_t(1 + q_aq/q_ap)``
with the similarity ``q_ab = exp_k(-||y_a - y_b||²)``. ``t = 1`` is the log loss of
t-STE; ``t = 2`` bounds every triplet's cost by 1, so reversed (noisy) triplets cannot
dominate. ``k`` (``kernel_t``) sets the kernel's tail: 2 is the Student-t kernel of t-STE
and of the paper; ``kernel_t="same"`` uses ``t`` for both, as the authors' code does.

`TETE` fits one dimension and one loss; `TETESearch` (app/learn/tete_search.py) chooses
them on held-out answers, as GridSearchCV chooses an estimator's parameters.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from app.learn import _tete_scale as scale
from app.learn._tete_line import SERIATED_MOST, seriated, unfolded
from app.learn._tete_loss import (
    QUICK_MAX_ITER,
    SOE_MARGIN,
    _descend,
    _lbfgs,
    default_t,
)
from app.learn._tete_sgd import DIMENSION_TAIL, HINGE
from app.learn.metrics import triplet_error
from app.learn.triplets import check_triplets

OPTIMIZERS = ("gd", "lbfgs")
# A line is unfolded and fitted again at most this many times (1 is nearly always enough).
UNFOLD_ROUNDS = 3


# The losses by name: (temperature or margin, kernel tail).
NAMED_LOSSES = {
    "t-STE": (1.0, 2.0),
    "t-ETE": (2.0, 2.0),
    "STE": (1.0, 1.0),
    "SOE": (SOE_MARGIN, HINGE),
    "t-STE(d-1)": (1.0, DIMENSION_TAIL),
}


def _loss(candidate) -> tuple[str, float, float]:
    """A candidate loss as (name, t or margin, kernel code)."""
    if isinstance(candidate, str) and candidate in NAMED_LOSSES:
        return (candidate, *NAMED_LOSSES[candidate])
    if (
        isinstance(candidate, Real)
        and not isinstance(candidate, bool)
        and 1 <= float(candidate) <= 3
    ):
        return (f"t={float(candidate):g}", float(candidate), 2.0)
    raise ValueError(
        f"losses must be named ({', '.join(NAMED_LOSSES)}) or temperatures in [1, 3]; "
        f"got {candidate!r}"
    )


class TETE(BaseEstimator):
    """t-Exponential Triplet Embedding in one dimension with one loss (`TETESearch`
    chooses both).

    Parameters
    ----------
    n_components : dimension of the embedding.
    t : loss temperature: a number in [1, 3] (1 is t-STE, 2 caps what a wrong triplet
        can cost), or None (default) for the authors' ``min(1.45 + 1.1/n_components, 2)``.
    kernel_t : tail of the similarity kernel for a given t: 2 (Student-t, default) or
        "same" as ``t``.
    loss : a named loss instead of t and kernel_t: "t-STE" (t = 1, Student-t kernel),
        "t-ETE" (t = 2), "STE" (Gaussian kernel), "SOE" (a squared hinge on distances,
        margin 0.1), "t-STE(d-1)" (t-STE as its authors and cblearn set it: d - 1
        degrees of freedom in d dimensions); None (default): t and kernel_t.
    max_iter, patience, tol : at most `max_iter` full-batch steps; stop after `patience`
        steps that did not lower the loss, or once the best loss improved by less than
        `tol` (relative) over 10 steps.
    n_iter_no_change : also stop once the training triplet error has not fallen by 0.01
        points in this many steps (None: never; with ``tol=0`` too, all `max_iter` steps
        run); the authors' optimiser only.
    optimizer : "gd", the authors' full-batch gradient descent with their adaptive step
        (default), or "lbfgs" (scipy's L-BFGS on the same loss and gradient).
    init_scale : standard deviation of the initial Gaussian embedding (the authors: 1e-4;
        L-BFGS does better from 1, as cblearn starts).
    stochastic_from : from this many triplets (default 100,000; None: never) a fit
        starts with a few epochs of stochastic steps before the full-batch ones (and
        `TETESearch` chooses on one held-out share instead of folds, as it does from
        `DENSE_FROM` answers an item; None: never).
    random_state : seed of the initial embedding (and of `TETESearch`'s folds).

    Attributes
    ----------
    embedding_ : (n_items, n_components_) array, centred and turned onto its principal
        axes (the first spreads the items most: a plot of the first two shows the most).
    loss_, t_, n_components_ : the loss, its temperature (None for SOE) and the dimension.
    loss_curve_ : training loss at each step (of the final loss, where a search went on
        from another loss's embedding).
    n_iter_ : steps taken.
    converged_ : whether the fit stopped because it settled (False: it ran out of
        `max_iter` steps while still improving).
    planned_steps_ : the most steps the fit takes (the callback's count ends there).
    """

    # What fit sets, declared for the type checker (scikit-learn's habit: not in __init__).
    embedding_: np.ndarray
    loss_: str
    t_: float | None
    n_components_: int
    loss_curve_: np.ndarray
    n_iter_: int
    converged_: bool
    planned_steps_: int
    _loss_code: tuple[str, float, float]

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, 256, closed="both")],
        "t": [Interval(Real, 1, 3, closed="both"), None],
        "kernel_t": [Interval(Real, 1, 3, closed="both"), StrOptions({"same"})],
        "loss": [StrOptions(set(NAMED_LOSSES)), None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "patience": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left"), None],
        "optimizer": [StrOptions(set(OPTIMIZERS))],
        "init_scale": [Interval(Real, 0, None, closed="neither")],
        "stochastic_from": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components: int = 2,
        t: float | None = None,
        kernel_t=2.0,
        loss: str | None = None,
        max_iter: int = 1000,
        patience: int = 100,
        tol: float = 1e-5,
        n_iter_no_change: int | None = 200,
        optimizer: str = "gd",
        init_scale: float = 1.0,
        stochastic_from: int | None = scale.SCALE_FROM,
        random_state=None,
    ) -> None:
        self.n_components = n_components
        self.t = t
        self.kernel_t = kernel_t
        self.loss = loss
        self.max_iter = max_iter
        self.patience = patience
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.optimizer = optimizer
        self.init_scale = init_scale
        self.stochastic_from = stochastic_from
        self.random_state = random_state

    def _optimise(
        self,
        Y,
        triplets,
        weights,
        movable,
        step_scale,
        loss,
        callback=None,
        quick=False,
        threads=True,
    ):
        """`quick`: for ranking candidates (TETESearch's folds), half the error-based
        patience and at most QUICK_MAX_ITER steps. `threads=False`: every pass in this
        thread."""
        _, t, k = loss
        no_change = self.n_iter_no_change
        if quick and no_change:
            no_change = max(no_change // 2, 50)
        if self.optimizer == "lbfgs":
            return _lbfgs(Y, triplets, weights, t, k, movable, self.max_iter, callback, threads)
        most = min(self.max_iter, QUICK_MAX_ITER) if quick else self.max_iter
        return _descend(
            Y,
            triplets,
            weights,
            t,
            k,
            movable,
            most,
            self.patience,
            self.tol,
            step_scale,
            callback,
            no_change,
            threads=threads,
        )

    def _fixed_loss(self, d: int) -> tuple[str, float, float]:
        """Its loss as (name, t or margin, kernel code) in `d` dimensions."""
        if self.loss is not None:
            return _loss(self.loss)
        t = default_t(d) if self.t is None else float(self.t)
        k = t if self.kernel_t == "same" else float(self.kernel_t)
        name = {1.0: "t-STE", 2.0: "t-ETE"}.get(t, f"t={t:g}") if k == 2.0 else f"t={t:g}"
        return (name, t, k)

    def _at_scale(self, n_triplets: int) -> bool:
        """Whether a fit of this many triplets starts with stochastic epochs."""
        return (
            self.optimizer == "gd"
            and self.stochastic_from is not None
            and n_triplets >= self.stochastic_from
        )

    def _fold_seed(self) -> int:
        seed = self.random_state
        return (
            int(seed)
            if isinstance(seed, Integral)
            else int(check_random_state(seed).randint(2**31))
        )

    def fit(
        self,
        triplets,
        n_items: int | None = None,
        sample_weight=None,
        init=None,
        callback=None,
    ) -> TETE:
        """Embed items ``0..n_items-1`` so that the triplets hold as far as possible.

        `init` warm-starts from a given (n_items, n_components) embedding, e.g. the last
        fit's with rows for new items; `callback(step, loss)` is called after every step
        (at most `planned_steps_`); an exception it raises stops the fit."""
        self._validate_params()
        d = int(self.n_components)
        triplets, n, weights, init = checked_inputs(triplets, n_items, sample_weight, init, d)
        self.planned_steps_ = self.max_iter
        loss = self._fixed_loss(d)
        if init is not None:
            return self._fit_from(init.copy(), triplets, weights, loss, loss, True, callback)
        start, line = self._start(triplets, weights, n, d, check_random_state(self.random_state))
        return self._fit_from(start, triplets, weights, loss, loss, line, callback)

    def _start(self, triplets, weights, n: int, d: int, rng) -> tuple[np.ndarray, bool]:
        """(where a fit of these answers without `init` starts, whether that is a line in
        the items' seriated order): random in `d` dimensions otherwise."""
        if d == 1 and 2 < n <= SERIATED_MOST:
            # A line from a random start folds; seriation's order is worth keeping.
            return seriated(triplets, weights, n) * self.init_scale, True
        return rng.standard_normal((n, d)) * self.init_scale, False

    def _fit_from(self, Y, triplets, weights, loss, base, warm: bool, callback, done=0) -> TETE:
        """The fit from Y: a few stochastic epochs first at scale (fewer where Y is worth
        keeping: `warm`), `base` (at most QUICK_MAX_ITER steps) where it is not `loss`,
        then `loss`; `callback` counts steps on from `done`."""
        n, d = Y.shape
        steps = [done]

        def counted(step: int, value: float) -> None:
            if callback is not None:
                callback(steps[0] + step, value)

        if self._at_scale(len(triplets)):
            # One answer at a time first: a few epochs move every item hundreds of times.
            Y = scale.warm_up(
                Y,
                *scale.shuffled(triplets, weights, self._fold_seed()),
                loss,
                scale.EPOCHS_WARM if warm else scale.EPOCHS_FROM_SCRATCH,
                scale.WARM_RATE if warm else scale.RATE,
                self._fold_seed(),
            )
        if base != loss:
            Y, curve, _ = self._optimise(
                Y, triplets, weights, np.ones(n), float(n), base, counted, quick=True
            )
            steps[0] += len(curve)
        Y, curve, converged = self._optimise(
            Y, triplets, weights, np.ones(n), float(n), loss, counted
        )
        latest = curve
        for _ in range(UNFOLD_ROUNDS if d == 1 else 0):
            Y, moved = unfolded(Y, triplets, weights)
            if not moved:
                break
            steps[0] += len(latest)
            self.planned_steps_ = getattr(self, "planned_steps_", 0) + self.max_iter
            Y, latest, converged = self._optimise(
                Y, triplets, weights, np.ones(n), float(n), loss, counted
            )
            curve = np.concatenate([curve, latest])
        return self._fitted(Y, curve, converged, loss)

    def _fitted(self, Y, curve, converged: bool, loss) -> TETE:
        self.embedding_, self.loss_curve_, self.converged_ = scale.projected(Y), curve, converged
        self.n_iter_ = len(curve)
        self.n_components_ = int(Y.shape[1])
        self.loss_, self._loss_code = loss[0], loss
        self.t_ = None if loss[2] == HINGE else float(loss[1])
        return self

    def fit_transform(self, triplets, n_items: int | None = None, sample_weight=None):
        return self.fit(triplets, n_items, sample_weight).embedding_

    def place(self, triplets, n_new: int, sample_weight=None) -> np.ndarray:
        """Coordinates for `n_new` new items, ids ``n_items..n_items+n_new-1``, from their
        triplets with the fitted items; the fitted embedding stays as it is."""
        check_is_fitted(self, "embedding_")
        n, d = self.embedding_.shape
        triplets = check_triplets(triplets, n + n_new)
        weights = _check_weights(sample_weight, len(triplets))
        # Start each new item where the items it was judged closer to are.
        Y = np.vstack([self.embedding_, np.zeros((n_new, d))])
        new_anchor = triplets[:, 0] >= n
        for new in range(n, n + n_new):
            closer = triplets[new_anchor & (triplets[:, 0] == new), 1]
            closer = closer[closer < n]
            if len(closer):
                Y[new] = self.embedding_[closer].mean(axis=0)
        movable = np.zeros(n + n_new)
        movable[n:] = 1.0
        # Placing runs where it is asked (a web request): never with the threads of a
        # parallel pass. numba's OpenMP layer keeps a thread team per calling thread,
        # and with a second team on 2 cores every fit in the worker ran twice as long.
        placed, _, _ = self._optimise(
            Y, triplets, weights, movable, float(max(n_new, 1)), self._loss_code, threads=False
        )
        return placed[n:]

    def score(self, triplets) -> float:
        """Share of `triplets` the embedding satisfies."""
        check_is_fitted(self, "embedding_")
        return 1.0 - triplet_error(self.embedding_, triplets)


def checked_inputs(triplets, n_items, sample_weight, init, width: int | None = None):
    """The triplets, the number of items, the weights and the starting embedding of a
    fit (`width` columns, where given), checked: (triplets, n, weights, init or None)."""
    triplets = check_triplets(triplets, n_items)
    if len(triplets) == 0:
        raise ValueError("triplets is empty")
    n = int(triplets.max()) + 1 if n_items is None else int(n_items)
    weights = _check_weights(sample_weight, len(triplets))
    if init is not None:
        init = np.array(init, dtype=np.float64)
        if init.ndim != 2 or init.shape[0] != n or width not in (None, init.shape[1]):
            raise ValueError(f"init must have shape ({n}, {width or 'd'}); got {init.shape}")
        if not np.all(np.isfinite(init)):
            raise ValueError("init must be finite")
    return triplets, n, weights, init


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
