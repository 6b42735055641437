"""t-ETE: triplet embedding with a tempered loss that caps what a wrong triplet can cost
(Amid, Vlassis & Warmuth; ALGORITHMS.md §3).

Each triplet ``(a, p, q)`` ("a is closer to p than to q") costs ``w · log_t(1 + q_aq/q_ap)``
with the similarity ``q_ab = exp_k(-||y_a - y_b||²)``. ``t = 1`` is the log loss of
t-STE; ``t = 2`` bounds every triplet's cost by 1, so reversed (noisy) triplets cannot
dominate. ``k`` (``kernel_t``) sets the kernel's tail: 2 is the Student-t kernel of t-STE
and of the paper; ``kernel_t="same"`` uses ``t`` for both, as the authors' code does.
"""

from __future__ import annotations

import time
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.model_selection import KFold
from sklearn.neighbors import NearestNeighbors
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from app.learn import _tete_scale as scale
from app.learn._tete_loss import (
    DIMENSION_TOLERANCE,
    PRUNE_MARGIN,
    PRUNE_Z,
    QUICK_MAX_ITER,
    SOE_MARGIN,
    _descend,
    _lbfgs,
    _violations,
    default_t,
)
from app.learn._tete_sgd import DIMENSION_TAIL, HINGE, kernel_tail
from app.learn.judgements import group_folds, whole_groups
from app.learn.metrics import triplet_error
from app.learn.triplets import check_triplets

OPTIMIZERS = ("gd", "lbfgs")
AUTO = "auto"


# The losses "auto" may choose from, by name: (temperature or margin, kernel tail).
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
        f"candidates must name losses ({', '.join(NAMED_LOSSES)}) or temperatures in "
        f"[1, 3]; got {candidate!r}"
    )


def _distinct_at(losses, d: int) -> list:
    """The losses that differ in `d` dimensions (t-STE(d-1) is t-STE below 3-D)."""
    if not losses:
        return []
    seen, distinct = set(), []
    for loss in losses:
        resolved = (loss[1], kernel_tail(loss[2], d))
        if resolved not in seen:
            seen.add(resolved)
            distinct.append(loss)
    return distinct


def _check_dimensions(values) -> tuple[int, ...]:
    values = tuple(values)
    if not values or any(not isinstance(v, Integral) or not 1 <= int(v) <= 256 for v in values):
        raise ValueError("dimension_candidates must be a non-empty list of integers in [1, 256]")
    return tuple(sorted(set(int(v) for v in values)))


class TETE(BaseEstimator):
    """t-Exponential Triplet Embedding, and the losses it is chosen against.

    Parameters
    ----------
    n_components : dimension of the embedding, or "auto": the smallest of
        `dimension_candidates` whose cross-validated held-out error is within one
        standard error (or 0.002) of the best: a simpler map that explains the answers
        as well.
    t : loss temperature: a number in [1, 3] (1 is t-STE, 2 caps what a wrong triplet
        can cost), None for the authors' ``min(1.45 + 1.1/n_components, 2)``, or "auto"
        (default): each of `candidates` is tried by `cv`-fold cross-validation over the
        triplets and the one with the lowest held-out triplet error is refit on all of
        them. People err on near ties rather than at random, and then the heavy tail of
        t-ETE gives their answers too little weight; with random lapses it helps. The
        data decide.
    kernel_t : tail of the similarity kernel for a given t: 2 (Student-t, default) or
        "same" as ``t``.
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
    candidates : the losses "auto" tries: "t-STE" (t = 1, Student-t kernel), "t-ETE"
        (t = 2), "STE" (Gaussian kernel), "SOE" (a squared hinge on distances, margin
        0.1), "t-STE(d-1)" (t-STE as its authors and cblearn set it: d - 1 degrees of
        freedom in d dimensions, a thinner tail as d grows; the same as "t-STE" below
        3-D, where it is not tried twice), or a temperature between 1 and 3. In each
        fold the first is fitted from scratch and the others continue from its
        embedding, so each costs a fraction of a fit (at most 250 steps a fold). After
        the first fold, a candidate 0.01 behind the best, or 0.002 behind and worse by
        two paired standard errors on the same held-out answers, is not tried on the
        others; where one candidate is left, the other folds are not run. The final
        fit on every triplet follows the same path: the first loss (at most 250 steps),
        then the chosen one from its embedding.
    dimension_candidates, cv : what n_components="auto" tries, in ascending order while a
        dimension lowers the best held-out error by more than 0.002 (the ones above the
        first that does not are not tried); how many folds.
    stochastic_from : from this many triplets (default 100,000; None: never) a choice
        is made on one held-out share instead of folds (see `_tete_scale`), and every fit
        starts with a few epochs of stochastic steps before the full-batch ones.
    random_state : seed of the initial embedding and of the folds.

    Attributes
    ----------
    embedding_ : (n_items, n_components_) array, centred and turned onto its principal
        axes (the first spreads the items most: a plot of the first two shows the most).
    loss_, t_, n_components_ : the loss, its temperature (None for SOE) and the dimension
        fitted (chosen, where "auto").
    cv_results_ : where something was chosen, as scikit-learn's GridSearchCV has it:
        "params", "param_loss", "param_n_components", "split<i>_test_error" (NaN where
        pruned), "mean_test_error", "std_test_error", "rank_test_error", "folds_tried",
        "mean_fit_time".
    best_params_, best_index_, selection_ : the choice, and a sentence saying why.
    loss_curve_ : training loss at each step of the final fit's chosen loss (after at
        most 250 steps of the first loss, where they differ).
    n_iter_ : steps the chosen loss took in the final fit.
    converged_ : whether the final fit stopped because it settled (False: it ran out of
        `max_iter` steps while still improving).
    """

    # What fit sets, declared for the type checker (scikit-learn's habit: not in __init__).
    embedding_: np.ndarray
    loss_: str
    t_: float | None
    n_components_: int
    cv_results_: dict[str, Any] | None
    best_params_: dict[str, Any]
    best_index_: int | None
    selection_: str
    loss_curve_: np.ndarray
    n_iter_: int
    converged_: bool
    planned_steps_: int
    _loss_code: tuple[str, float, float]

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left"), StrOptions({AUTO})],
        "t": [Interval(Real, 1, 3, closed="both"), StrOptions({AUTO}), None],
        "kernel_t": [Interval(Real, 1, 3, closed="both"), StrOptions({"same"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "patience": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left"), None],
        "optimizer": [StrOptions(set(OPTIMIZERS))],
        "init_scale": [Interval(Real, 0, None, closed="neither")],
        # Their entries are checked where they are read (_loss, _check_dimensions).
        "candidates": ["array-like"],
        "dimension_candidates": ["array-like"],
        "cv": [Interval(Integral, 2, None, closed="left")],
        "stochastic_from": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components=2,
        t=AUTO,
        kernel_t=2.0,
        max_iter: int = 1000,
        patience: int = 100,
        tol: float = 1e-5,
        n_iter_no_change: int | None = 200,
        optimizer: str = "gd",
        init_scale: float = 1.0,
        candidates=("t-STE", "t-ETE", 1.5, "STE", "SOE", "t-STE(d-1)"),
        dimension_candidates=(1, 2, 3, 5, 8, 12, 16, 24, 32, 48, 64),
        cv: int = 3,
        stochastic_from: int | None = scale.SCALE_FROM,
        random_state=None,
    ) -> None:
        self.n_components = n_components
        self.t = t
        self.kernel_t = kernel_t
        self.max_iter = max_iter
        self.patience = patience
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.optimizer = optimizer
        self.init_scale = init_scale
        self.candidates = candidates
        self.dimension_candidates = dimension_candidates
        self.cv = cv
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
        """`quick`: for ranking candidates in the folds, half the error-based patience
        and at most QUICK_MAX_ITER steps. `threads=False`: every pass in this thread."""
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

    def _grid(self) -> tuple[tuple[int, ...], list | None]:
        """The dimensions, and the losses to try (None: the one fixed by t, per dimension)."""
        dims = (
            _check_dimensions(self.dimension_candidates)
            if self.n_components == AUTO
            else (int(self.n_components),)
        )
        losses = None
        if self.t == AUTO:
            losses = list(dict.fromkeys(_loss(candidate) for candidate in self.candidates))
            if not losses:
                raise ValueError("candidates must name at least one loss")
        return dims, losses

    def _fixed_loss(self, d: int) -> tuple[str, float, float]:
        t = default_t(d) if self.t is None else float(self.t)
        k = t if self.kernel_t == "same" else float(self.kernel_t)
        name = {1.0: "t-STE", 2.0: "t-ETE"}.get(t, f"t={t:g}") if k == 2.0 else f"t={t:g}"
        return (name, t, k)

    def _path(self, triplets, weights, n, d, losses, start, rng, callback, quick=False):
        """Fit the first loss from `start`, then each other one from its embedding;
        yields (loss, embedding, loss curve, converged) after each."""
        base = start(n, d, rng)
        for position, loss in enumerate(losses):
            Y, curve, converged = self._optimise(
                base.copy(), triplets, weights, np.ones(n), float(n), loss, callback, quick
            )
            if position == 0:
                base = Y
            yield loss, Y, curve, converged

    def fit(
        self,
        triplets,
        n_items: int | None = None,
        sample_weight=None,
        init=None,
        callback=None,
        unbiased=None,
        groups=None,
    ) -> TETE:
        """Embed items ``0..n_items-1`` so that the triplets hold as far as possible.

        `init` warm-starts from a given (n_items, n_components) embedding, e.g. the last
        fit's with rows for new items (a dimension "auto" tries of another size starts
        afresh); `callback(step, loss)` is called after every step, counting on through
        the cross-validation and the final fit (at most `planned_steps_`); an exception
        it raises stops the fit. `unbiased` (one flag per triplet, default all) marks the
        answers to questions drawn uniformly at random: the cross-validation holds out
        and measures only these, and always fits the others (questions chosen adaptively
        lean towards hard ones: an error measured on them is biased). `groups` (one label
        per triplet) names the judgement each triplet came from: a fold holds out a
        judgement's triplets together or none of them (one screen's triplets are not
        independent)."""
        self._validate_params()
        triplets = check_triplets(triplets, n_items)
        if len(triplets) == 0:
            raise ValueError("triplets is empty")
        n = int(triplets.max()) + 1 if n_items is None else int(n_items)
        weights = _check_weights(sample_weight, len(triplets))
        if unbiased is not None:
            unbiased = np.asarray(unbiased)
            if unbiased.shape != (len(triplets),) or unbiased.dtype != bool:
                raise ValueError(
                    f"unbiased must be one boolean per triplet ({len(triplets)}); "
                    f"got {unbiased.dtype} of shape {unbiased.shape}"
                )
        if groups is not None:
            groups = np.asarray(groups)
            if groups.shape != (len(triplets),):
                raise ValueError(
                    f"groups must be one label per triplet ({len(triplets)}); got shape "
                    f"{groups.shape}"
                )
        if not isinstance(self.init_scale, Real) or self.init_scale <= 0:
            raise ValueError(f"init_scale must be positive; got {self.init_scale!r}")
        if init is not None:
            init = np.array(init, dtype=np.float64)
            if (
                init.ndim != 2
                or init.shape[0] != n
                or (self.n_components != AUTO and init.shape[1] != self.n_components)
            ):
                wanted = "d" if self.n_components == AUTO else self.n_components
                raise ValueError(f"init must have shape ({n}, {wanted}); got {init.shape}")
            if not np.all(np.isfinite(init)):
                raise ValueError("init must be finite")

        def start(rows: int, d: int, seeded) -> np.ndarray:
            if init is not None and init.shape[1] == d:
                return init.copy()
            return seeded.standard_normal((rows, d)) * self.init_scale

        dims, losses = self._grid()
        per_dim = len(losses) if losses else 1
        at_scale = (
            self.optimizer == "gd"
            and self.stochastic_from is not None
            and len(triplets) >= self.stochastic_from
        )
        if at_scale and len(dims) * per_dim > 1:
            holdout = self._holdout(len(triplets), unbiased, groups)
            if holdout is not None:
                return self._fit_at_scale(
                    triplets, weights, n, dims, losses, holdout, init, callback
                )
        folds = self._folds(len(triplets), len(dims) * per_dim, unbiased, groups)
        quick_steps = (
            self.max_iter if self.optimizer == "lbfgs" else min(self.max_iter, QUICK_MAX_ITER)
        )
        self.planned_steps_ = (len(dims) * per_dim * len(folds) + 1) * quick_steps + self.max_iter
        done = [0]

        def counted(step: int, loss: float) -> None:
            if callback is not None:
                callback(done[0] + step, loss)

        if folds:
            chosen = self._cross_validate(
                triplets, weights, n, dims, losses, folds, start, counted, done
            )
            d = self.best_params_["n_components"]
        else:
            d = dims[0]
            chosen = losses[0] if losses else self._fixed_loss(d)
            self.cv_results_ = None
            self.best_params_ = {"n_components": d, "loss": chosen[0]}
            self.best_index_ = None
            self.selection_ = (
                f"{chosen[0]}, {d}-D: as given"
                if len(dims) * per_dim == 1
                else f"{chosen[0]}, {d}-D: too few {_measurable(unbiased, len(triplets))} to "
                f"cross-validate a choice in {self.cv} folds"
            )
        # On every answer, the way each candidate was measured: the base loss (quick),
        # then the chosen one from its embedding. Going on from a fold's embedding instead
        # kept what that fold got wrong: the bounded t-ETE loss leaves a folded cluster
        # folded (planted, neighbour questions: 1.3 % held-out error against 1.0 %).
        Y = start(n, d, check_random_state(self.random_state))
        if at_scale:
            # One answer at a time first: a few epochs move every item hundreds of times.
            warm = init is not None and init.shape[1] == d
            Y = scale.warm_up(
                Y,
                *scale.shuffled(triplets, weights, self._fold_seed()),
                chosen,
                scale.EPOCHS_WARM if warm else scale.EPOCHS_FROM_SCRATCH,
                scale.WARM_RATE if warm else scale.RATE,
                self._fold_seed(),
            )
        base = losses[0] if losses else chosen
        if base != chosen:
            Y, curve, _ = self._optimise(
                Y, triplets, weights, np.ones(n), float(n), base, counted, quick=True
            )
            done[0] += len(curve)
        Y, curve, converged = self._optimise(
            Y, triplets, weights, np.ones(n), float(n), chosen, counted
        )
        self.embedding_, self.loss_curve_, self.converged_ = scale.projected(Y), curve, converged
        self.n_iter_ = len(curve)
        self.n_components_ = int(d)
        self.loss_, self._loss_code = chosen[0], chosen
        self.t_ = None if chosen[2] == HINGE else float(chosen[1])
        return self

    def _fit_at_scale(self, triplets, weights, n, dims, losses, holdout, init, callback):
        fit_rows, held_rows = holdout
        screen, above, below = scale.ladder(dims, scale.SCREEN_DIMENSION)
        losses = losses or [self._fixed_loss(screen)]
        warm = init is not None and init.shape[1] == screen
        self.planned_steps_ = scale.planned_units(len(losses), len(above) + len(below), warm)

        def start(d: int):
            return init.copy() if init is not None and init.shape[1] == d else None

        def report(units: int) -> None:
            if callback is not None:
                callback(units, float("nan"))

        Y, curve, settled, (d, loss), tried, why = scale.choose(
            self, triplets, weights, n, dims, losses, fit_rows, held_rows, start, report
        )
        errors = np.array([error for _, _, error, _ in tried])
        order = np.argsort(errors, kind="stable")
        rank = np.empty(len(tried), np.int64)
        rank[order] = np.arange(1, len(tried) + 1)
        self.cv_results_ = {
            "params": [{"n_components": c_d, "loss": c_loss[0]} for c_d, c_loss, _, _ in tried],
            "param_n_components": np.array([c_d for c_d, _, _, _ in tried]),
            "param_loss": np.array([c_loss[0] for _, c_loss, _, _ in tried]),
            "split0_test_error": errors,
            "mean_test_error": errors,
            "std_test_error": np.zeros(len(tried)),
            "rank_test_error": rank,
            "folds_tried": np.ones(len(tried), np.int64),
            "mean_fit_time": np.array([seconds for _, _, _, seconds in tried]),
        }
        self.best_index_ = next(
            i for i, (c_d, c_loss, _, _) in enumerate(tried) if (c_d, c_loss) == (d, loss)
        )
        self.best_params_ = {"n_components": d, "loss": loss[0]}
        self.selection_ = why
        self.embedding_, self.loss_curve_, self.converged_ = scale.projected(Y), curve, settled
        self.n_iter_ = len(curve)
        self.n_components_ = int(d)
        self.loss_, self._loss_code = loss[0], loss
        self.t_ = None if loss[2] == HINGE else float(loss[1])
        return self

    def _holdout(self, n_triplets: int, unbiased=None, groups=None):
        """One held-out share for the choice at scale, (fit rows, held-out rows): a tenth
        of the `unbiased` answers, at most HOLDOUT_MOST, whole `groups` at a time; None
        where a tenth is under 10 × cv answers."""
        eligible = n_triplets if unbiased is None else int(unbiased.sum())
        wanted = min(scale.HOLDOUT_MOST, eligible // 10)
        if wanted < 10 * self.cv:
            return None
        rng = np.random.default_rng(self._fold_seed())
        if groups is None:
            rows = np.arange(n_triplets) if unbiased is None else np.flatnonzero(unbiased)
            held = np.sort(rng.choice(rows, wanted, replace=False))
        else:
            # Whole judgements, drawn until they hold `wanted` answers.
            of_row, sizes, whole = whole_groups(groups, unbiased)
            order = rng.permutation(np.flatnonzero(whole))
            taken = order[: int(np.searchsorted(np.cumsum(sizes[order]), wanted)) + 1]
            held = np.flatnonzero(np.isin(of_row, taken))
        return np.setdiff1d(np.arange(n_triplets), held, assume_unique=True), held

    def _folds(self, n_triplets: int, n_candidates: int, unbiased=None, groups=None) -> list:
        """The cross-validation folds, where there is a choice to make and enough
        triplets to make it (10 a fold at least): (fit rows, held-out rows), the held-out
        rows drawn from the `unbiased` ones only, each of the `groups` whole."""
        if n_candidates == 1:
            return []
        eligible = np.arange(n_triplets) if unbiased is None else np.flatnonzero(unbiased)
        if len(eligible) < 10 * self.cv:
            return []
        if groups is not None:
            return group_folds(groups, self.cv, self._fold_seed(), eligible=unbiased)
        splitter = KFold(n_splits=self.cv, shuffle=True, random_state=self._fold_seed())
        folds = list(splitter.split(np.empty((len(eligible), 1))))
        if len(eligible) == n_triplets:
            return folds
        every = np.arange(n_triplets)
        return [
            (np.setdiff1d(every, eligible[held], assume_unique=True), eligible[held])
            for _, held in folds
        ]

    def _fold_seed(self) -> int:
        seed = self.random_state
        return (
            int(seed)
            if isinstance(seed, Integral)
            else int(check_random_state(seed).randint(2**31))
        )

    def _cross_validate(self, triplets, weights, n, dims, losses, folds, start, counted, done):
        per_dim = {d: (_distinct_at(losses, d) or [self._fixed_loss(d)]) for d in dims}
        candidates = [(d, loss) for d in dims for loss in per_dim[d]]
        errors = np.full((len(candidates), len(folds)), np.nan)
        seconds = np.zeros(len(candidates))
        alive = set(range(len(candidates)))
        lowest_below = np.inf
        for fold, (fit_rows, held_rows) in enumerate(folds):
            rng = np.random.default_rng([self._fold_seed(), fold])
            fitted_on, fit_weights = triplets[fit_rows], weights[fit_rows]
            held = triplets[held_rows]
            wrong: dict[int, np.ndarray] = {}  # what each got wrong of the held-out answers
            for d in dims:
                # The first loss of a dimension is its base: fitted while any is alive.
                tried = [loss for loss in per_dim[d] if candidates.index((d, loss)) in alive]
                if not tried:
                    continue
                path = [per_dim[d][0]] + [loss for loss in tried if loss != per_dim[d][0]]
                began = time.perf_counter()
                for loss, Y, curve, _ in self._path(
                    fitted_on,
                    fit_weights,
                    n,
                    d,
                    path,
                    start,
                    check_random_state(int(rng.integers(2**31))),
                    counted,
                    quick=True,
                ):
                    done[0] += len(curve)
                    row = candidates.index((d, loss))
                    if row in alive:
                        wrong[row] = _violations(Y, held)
                        errors[row, fold] = wrong[row].mean()
                    seconds[row] += time.perf_counter() - began
                    began = time.perf_counter()
                if fold == 0 and self.n_components == AUTO:
                    # Climb while a dimension lowers the best error by more than the
                    # tolerance; the dimensions above one that did not are not tried.
                    here = np.nanmin(errors[[candidates.index((d, x)) for x in per_dim[d]], 0])
                    if here >= lowest_below - DIMENSION_TOLERANCE:
                        alive -= {i for i, (c_d, _) in enumerate(candidates) if c_d > d}
                    lowest_below = min(lowest_below, here)
            if fold == 0:
                alive = _survivors(errors[:, 0], wrong)
                if len(alive) == 1:
                    break
        # Candidates above where the dimensions stopped climbing were never tried.
        tried = np.flatnonzero(~np.isnan(errors).all(axis=1))
        candidates = [candidates[i] for i in tried]
        errors, seconds = errors[tried], seconds[tried]
        tried_folds = np.sum(~np.isnan(errors), axis=1)
        run = int(tried_folds.max())
        mean = np.nanmean(errors, axis=1)
        std = np.nanstd(errors, axis=1)
        complete = [i for i in range(len(candidates)) if tried_folds[i] == run]
        best = min(complete, key=lambda i: mean[i])
        over = f"{run} folds" if run > 1 else f"the first of {len(folds)} folds"
        reason = f"lowest held-out triplet error over {over}"
        if self.n_components == AUTO:
            # One standard error: the smallest dimension that is as good within the
            # folds' own spread (or 0.2 points), at its best loss.
            bar = mean[best] + max(std[best] / np.sqrt(run), DIMENSION_TOLERANCE)
            smallest = min(candidates[i][0] for i in complete if mean[i] <= bar)
            if candidates[best][0] != smallest:
                reason = (
                    f"the smallest dimension within one standard error or 0.002 ({bar:.4f}) of the "
                    f"lowest held-out triplet error over {over}"
                )
            best = min((i for i in complete if candidates[i][0] == smallest), key=lambda i: mean[i])
        # Complete candidates rank first (by error), then those pruned after one fold.
        order = sorted(range(len(candidates)), key=lambda i: (tried_folds[i] < run, mean[i]))
        rank = np.empty(len(candidates), np.int64)
        rank[order] = np.arange(1, len(candidates) + 1)
        self.cv_results_ = {
            "params": [{"n_components": d, "loss": loss[0]} for d, loss in candidates],
            "param_n_components": np.array([d for d, _ in candidates]),
            "param_loss": np.array([loss[0] for _, loss in candidates]),
            **{f"split{i}_test_error": errors[:, i] for i in range(len(folds))},
            "mean_test_error": mean,
            "std_test_error": std,
            "rank_test_error": rank,
            "folds_tried": tried_folds,
            "mean_fit_time": seconds / np.maximum(tried_folds, 1),
        }
        self.best_index_ = best
        self.best_params_ = dict(self.cv_results_["params"][best])
        d, loss = candidates[best]
        pruned = len(candidates) - len(complete)
        self.selection_ = (
            f"{loss[0]}, {d}-D: {reason} "
            f"({mean[best]:.4f} ± {std[best]:.4f}; "
            + ", ".join(
                f"{c_loss[0]}{'' if len(dims) == 1 else f' {c_d}-D'}: {mean[i]:.4f}"
                + ("" if tried_folds[i] == run else " (1 fold)")
                for i, (c_d, c_loss) in enumerate(candidates)
            )
            + ")"
            + (
                f"; {pruned} left after the first fold, {PRUNE_MARGIN} behind or clearly worse "
                f"on the same answers"
                if pruned
                else ""
            )
            + ("; the other folds not run: one candidate left" if run < len(folds) else "")
            + _climb_stopped(dims, [c_d for c_d, _ in candidates])
        )
        return loss

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


def _survivors(first: np.ndarray, wrong: dict[int, np.ndarray]) -> set[int]:
    """The candidates worth the other folds, from the first fold's held-out errors and
    what each got wrong there: within PRUNE_MARGIN of the best, and either within
    DIMENSION_TOLERANCE of it or not PRUNE_Z paired standard errors worse (the same
    answers judged by both embeddings: only where they disagree counts)."""
    best = min(wrong, key=lambda i: first[i])
    kept = set()
    for i, flags in wrong.items():
        behind = first[i] - first[best]
        if behind > PRUNE_MARGIN:
            continue
        if behind > DIMENSION_TOLERANCE:
            difference = flags - wrong[best]
            spread = difference.std(ddof=1) / np.sqrt(len(difference))
            if spread == 0.0 or behind > PRUNE_Z * spread:
                continue
        kept.add(i)
    return kept


def _climb_stopped(dims, tried_dims) -> str:
    highest = max(tried_dims)
    if highest == max(dims):
        return ""
    return f"; dimensions above {highest} not tried: {highest} did not lower the error"


def _measurable(unbiased, n_triplets: int) -> str:
    if unbiased is None:
        return f"triplets ({n_triplets})"
    return f"answers to uniformly random questions ({int(unbiased.sum())} of {n_triplets})"


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
