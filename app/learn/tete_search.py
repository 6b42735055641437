"""t-ETE's choice of dimension and loss: a meta-estimator beside the plain `TETE`, as
scikit-learn's GridSearchCV stands beside an estimator.

Candidates (a dimension and a loss) are compared on held-out answers and the chosen one
is refitted on all of them (`best_estimator_`, a fitted TETE). People err on near ties
rather than at random, and then the heavy tail of t-ETE gives their answers too little
weight; with random lapses it helps: the data decide. Up to `stochastic_from` answers
the comparison is a cross-validation over the triplets; above, and for studies with
DENSE_FROM answers an item or more, one held-out share and stochastic epochs
(app/learn/_tete_scale.py).
"""

from __future__ import annotations

import time
from numbers import Integral
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.model_selection import KFold
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval
from sklearn.utils.validation import check_is_fitted

from app.learn import _tete_scale as scale
from app.learn._tete_loss import (
    DIMENSION_TOLERANCE,
    PRUNE_MARGIN,
    PRUNE_Z,
    QUICK_MAX_ITER,
    _violations,
)
from app.learn._tete_sgd import kernel_tail
from app.learn.judgements import group_folds, whole_groups
from app.learn.tete import NAMED_LOSSES, TETE, _loss, checked_inputs

DEFAULT_LOSSES = ("t-STE", "t-ETE", 1.5, "STE", "SOE", "t-STE(d-1)")
DEFAULT_DIMENSIONS = (1, 2, 3, 5, 8, 12, 16, 24, 32, 48, 64)
# From this many answers an item (and from `stochastic_from` answers whatever the items)
# the choice is made on one held-out share instead of folds. On planted studies of 40 to
# 100 items with 800 to 1,000 answers each it chose within 0.001 of the folds' held-out
# error in a third of the time (100 items, 93,000 answers: 1.7 s against 6.0 s, cblearn's
# TSTE 3.8 s); at 500 an item it was up to 0.003 worse with lapses
# (benchmarks/tete_choice_speed.py).
DENSE_FROM = 800


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
        raise ValueError("dimensions must be a non-empty list of integers in [1, 256]")
    return tuple(sorted(set(int(v) for v in values)))


def _as_params(loss) -> dict[str, Any]:
    """The TETE parameters that fix a loss (name, t or margin, kernel code)."""
    if loss[0] in NAMED_LOSSES:
        return {"loss": loss[0]}
    return {"loss": None, "t": loss[1], "kernel_t": 2.0}


class TETESearch(BaseEstimator):
    """The dimension and loss of a t-ETE embedding chosen on held-out answers.

    Parameters
    ----------
    estimator : the TETE whose other parameters every candidate keeps (default TETE());
        its `random_state` seeds the folds too.
    losses : the losses tried (names of `TETE.loss`, or temperatures in [1, 3]); None:
        the estimator's own. In each fold the first is fitted from scratch and the
        others continue from its embedding, so each costs a fraction of a fit (at most
        250 steps a fold). After the first fold, a candidate 0.01 behind the best, or
        0.002 behind and worse by two paired standard errors on the same held-out
        answers, is not tried on the others; where one candidate is left, the other
        folds are not run. The final fit on every triplet follows the same path: the
        first loss (at most 250 steps), then the chosen one from its embedding.
    dimensions : the dimensions tried, in ascending order while a dimension lowers the
        best held-out error by more than 0.002 (the ones above the first that does not
        are not tried); the smallest within one standard error (or 0.002) of the best
        wins: a simpler map that explains the answers as well. None: the estimator's.
    cv : how many folds.

    Attributes
    ----------
    best_estimator_ : the chosen TETE, fitted on every triplet; `embedding_`, `loss_`,
        `t_`, `n_components_`, `loss_curve_`, `n_iter_` and `converged_` are its.
    cv_results_ : as scikit-learn's GridSearchCV has it: "params", "param_loss",
        "param_n_components", "split<i>_test_error" (NaN where pruned),
        "mean_test_error", "std_test_error", "rank_test_error", "folds_tried",
        "mean_fit_time"; None where nothing was compared.
    best_params_, best_index_, selection_ : the choice, and a sentence saying why.
    planned_steps_ : the most steps the search and the final fit take.
    """

    cv_results_: dict[str, Any] | None
    best_params_: dict[str, Any]
    best_index_: int | None
    selection_: str
    planned_steps_: int
    best_estimator_: TETE

    _parameter_constraints: dict = {
        "estimator": [HasMethods(["fit", "place"]), None],
        # Their entries are checked where they are read (_loss, _check_dimensions).
        "losses": ["array-like", None],
        "dimensions": ["array-like", None],
        "cv": [Interval(Integral, 2, None, closed="left")],
    }

    def __init__(
        self,
        estimator: TETE | None = None,
        losses=DEFAULT_LOSSES,
        dimensions=DEFAULT_DIMENSIONS,
        cv: int = 3,
    ) -> None:
        self.estimator = estimator
        self.losses = losses
        self.dimensions = dimensions
        self.cv = cv

    # -- the chosen embedding, as a TETE has it ---------------------------------------

    @property
    def embedding_(self) -> np.ndarray:
        return self.best_estimator_.embedding_

    @property
    def loss_(self) -> str:
        return self.best_estimator_.loss_

    @property
    def t_(self) -> float | None:
        return self.best_estimator_.t_

    @property
    def n_components_(self) -> int:
        return self.best_estimator_.n_components_

    @property
    def loss_curve_(self) -> np.ndarray:
        return self.best_estimator_.loss_curve_

    @property
    def n_iter_(self) -> int:
        return self.best_estimator_.n_iter_

    @property
    def converged_(self) -> bool:
        return self.best_estimator_.converged_

    def place(self, triplets, n_new: int, sample_weight=None) -> np.ndarray:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.place(triplets, n_new, sample_weight)

    def score(self, triplets) -> float:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.score(triplets)

    def fit_transform(self, triplets, n_items: int | None = None, sample_weight=None):
        return self.fit(triplets, n_items, sample_weight).embedding_

    # -- the search -------------------------------------------------------------------

    def _grid(self, base: TETE) -> tuple[tuple[int, ...], list | None]:
        """The dimensions, and the losses to try (None: the estimator's, per dimension)."""
        dims = (
            _check_dimensions(self.dimensions)
            if self.dimensions is not None
            else (int(base.n_components),)
        )
        losses = None
        if self.losses is not None:
            losses = list(dict.fromkeys(_loss(candidate) for candidate in self.losses))
            if not losses:
                raise ValueError("losses must name at least one loss")
        return dims, losses

    def _candidate(self, base: TETE, d: int, loss) -> TETE:
        return clone(base).set_params(n_components=d, **_as_params(loss))

    def fit(
        self,
        triplets,
        n_items: int | None = None,
        sample_weight=None,
        init=None,
        callback=None,
        unbiased=None,
        groups=None,
    ) -> TETESearch:
        """Choose and fit on the triplets of items ``0..n_items-1``.

        `init` warm-starts the candidates of its dimension from a given embedding (e.g.
        the last fit's, with rows for new items); `callback(step, loss)` is called after
        every step, counting on through the search and the final fit (at most
        `planned_steps_`); an exception it raises stops the fit. `unbiased` (one flag
        per triplet, default all) marks the answers to questions drawn uniformly at
        random: the search holds out and measures only these, and always fits the others
        (questions chosen adaptively lean towards hard ones: an error measured on them
        is biased). `groups` (one label per triplet) names the judgement each triplet
        came from: a fold holds out a judgement's triplets together or none of them (one
        screen's triplets are not independent)."""
        self._validate_params()
        base = TETE() if self.estimator is None else clone(self.estimator)
        base._validate_params()
        fixed = None if self.dimensions is not None else int(base.n_components)
        triplets, n, weights, init = checked_inputs(triplets, n_items, sample_weight, init, fixed)
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
        dims, losses = self._grid(base)

        def start(fitted_on, fit_weights, d: int, seeded) -> tuple[np.ndarray, bool]:
            """(where a candidate of d dimensions starts, whether that is a line in the
            items' seriated order, as a plain fit of its answers starts)"""
            if init is not None and init.shape[1] == d:
                return init.copy(), False
            return base._start(fitted_on, fit_weights, n, d, seeded)

        per_dim = len(losses) if losses else 1
        if self._on_one_share(base, len(triplets), n) and len(dims) * per_dim > 1:
            holdout = self._holdout(base, len(triplets), unbiased, groups)
            if holdout is not None:
                return self._fit_at_scale(
                    base, triplets, weights, n, dims, losses, holdout, init, callback
                )
        folds = self._folds(base, len(triplets), len(dims) * per_dim, unbiased, groups)
        quick_steps = (
            base.max_iter if base.optimizer == "lbfgs" else min(base.max_iter, QUICK_MAX_ITER)
        )
        self.planned_steps_ = (len(dims) * per_dim * len(folds) + 1) * quick_steps + base.max_iter
        done = [0]

        def counted(step: int, loss: float) -> None:
            if callback is not None:
                callback(done[0] + step, loss)

        if folds:
            chosen = self._cross_validate(
                base, triplets, weights, n, dims, losses, folds, start, counted, done
            )
            d = self.best_params_["n_components"]
        else:
            d = dims[0]
            chosen = losses[0] if losses else base._fixed_loss(d)
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
        # then the chosen one from its embedding (on a line, the chosen one from the line).
        # Going on from a fold's embedding instead kept what that fold got wrong: the
        # bounded t-ETE loss leaves a folded cluster folded (planted, neighbour questions:
        # 1.3 % held-out error against 1.0 %).
        best = self._candidate(base, d, chosen)
        Y, line = start(triplets, weights, d, check_random_state(base.random_state))
        warm = line or (init is not None and init.shape[1] == d)
        first = chosen if line or not losses else losses[0]
        best._fit_from(Y, triplets, weights, chosen, first, warm, callback, done[0])
        best.planned_steps_ = self.planned_steps_
        self.best_estimator_ = best
        return self

    def _fit_at_scale(self, base, triplets, weights, n, dims, losses, holdout, init, callback):
        fit_rows, held_rows = holdout
        screen, above, below = scale.ladder(dims, scale.SCREEN_DIMENSION)
        losses = losses or [base._fixed_loss(screen)]
        warm = init is not None and init.shape[1] == screen
        self.planned_steps_ = scale.planned_units(len(losses), len(above) + len(below), warm)

        # A line is not started in seriated order here: ten stochastic epochs move each
        # item hundreds of times and unfold it, and from seriation's start the fewer
        # epochs of a warm one ended worse (300 items, 120,000 answers: 1.4-1.5 % of
        # triplets wrong against 1.1-1.2 %).
        def start(d: int):
            return init.copy() if init is not None and init.shape[1] == d else None

        def report(units: int) -> None:
            if callback is not None:
                callback(units, float("nan"))

        def planned(units: int) -> None:
            self.planned_steps_ = units

        Y, curve, settled, (d, loss), tried, why = scale.choose(
            base, triplets, weights, n, dims, losses, fit_rows, held_rows, start, report, planned
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
        best = self._candidate(base, d, loss)._fitted(Y, curve, settled, loss)
        best.planned_steps_ = self.planned_steps_
        self.best_estimator_ = best
        return self

    def _on_one_share(self, base: TETE, n_triplets: int, n_items: int) -> bool:
        """Whether the choice is made on one held-out share (app/learn/_tete_scale.py):
        from `stochastic_from` answers, or from DENSE_FROM answers an item, where a
        tenth of them measures every candidate as well as folds do, in a third of the
        time or less."""
        if base.stochastic_from is None:
            return False
        dense = base.optimizer == "gd" and n_triplets >= DENSE_FROM * n_items
        return base._at_scale(n_triplets) or dense

    def _holdout(self, base: TETE, n_triplets: int, unbiased=None, groups=None):
        """One held-out share for the choice at scale, (fit rows, held-out rows): a tenth
        of the `unbiased` answers, at most HOLDOUT_MOST, whole `groups` at a time; None
        where a tenth is under 10 × cv answers."""
        eligible = n_triplets if unbiased is None else int(unbiased.sum())
        wanted = min(scale.HOLDOUT_MOST, eligible // 10)
        if wanted < 10 * self.cv:
            return None
        rng = np.random.default_rng(base._fold_seed())
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

    def _folds(
        self, base: TETE, n_triplets: int, n_candidates: int, unbiased=None, groups=None
    ) -> list:
        """The cross-validation folds, where there is a choice to make and enough
        triplets to make it (10 a fold at least): (fit rows, held-out rows), the held-out
        rows drawn from the `unbiased` ones only, each of the `groups` whole."""
        if n_candidates == 1:
            return []
        eligible = np.arange(n_triplets) if unbiased is None else np.flatnonzero(unbiased)
        if len(eligible) < 10 * self.cv:
            return []
        if groups is not None:
            return group_folds(groups, self.cv, base._fold_seed(), eligible=unbiased)
        splitter = KFold(n_splits=self.cv, shuffle=True, random_state=base._fold_seed())
        folds = list(splitter.split(np.empty((len(eligible), 1))))
        if len(eligible) == n_triplets:
            return folds
        every = np.arange(n_triplets)
        return [
            (np.setdiff1d(every, eligible[held], assume_unique=True), eligible[held])
            for _, held in folds
        ]

    def _path(self, base, triplets, weights, n, d, losses, start, rng, callback):
        """Fit the first loss from `start`, then each other one from its embedding (each
        quick); yields (loss, embedding, loss curve, converged) after each. From a line
        in seriated order every loss starts at the line: a heavy-tailed loss's fit of it
        bunches items, which a light-tailed one fitted next did not undo (100 items on a
        line: 4 % of triplets wrong against 2 %)."""
        Y0, line = start(triplets, weights, d, rng)
        for position, loss in enumerate(losses):
            Y, curve, converged = base._optimise(
                Y0.copy(), triplets, weights, np.ones(n), float(n), loss, callback, True
            )
            if position == 0 and not line:
                Y0 = Y
            yield loss, Y, curve, converged

    def _cross_validate(
        self, base, triplets, weights, n, dims, losses, folds, start, counted, done
    ):
        per_dim = {d: (_distinct_at(losses, d) or [base._fixed_loss(d)]) for d in dims}
        candidates = [(d, loss) for d in dims for loss in per_dim[d]]
        errors = np.full((len(candidates), len(folds)), np.nan)
        seconds = np.zeros(len(candidates))
        alive = set(range(len(candidates)))
        lowest_below = np.inf
        for fold, (fit_rows, held_rows) in enumerate(folds):
            rng = np.random.default_rng([base._fold_seed(), fold])
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
                    base,
                    fitted_on,
                    fit_weights,
                    n,
                    d,
                    path,
                    start,
                    check_random_state(int(rng.integers(2**31))),
                    counted,
                ):
                    done[0] += len(curve)
                    row = candidates.index((d, loss))
                    if row in alive:
                        wrong[row] = _violations(Y, held)
                        errors[row, fold] = wrong[row].mean()
                    seconds[row] += time.perf_counter() - began
                    began = time.perf_counter()
                if fold == 0 and self.dimensions is not None:
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
        return self._chosen(dims, candidates, errors, seconds, len(folds))

    def _chosen(self, dims, candidates, errors, seconds, n_folds):
        """Sets the search's results from the candidates' held-out errors per fold (NaN
        where not tried) and returns the chosen loss."""
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
        over = f"{run} folds" if run > 1 else f"the first of {n_folds} folds"
        reason = f"lowest held-out triplet error over {over}"
        if self.dimensions is not None:
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
            **{f"split{i}_test_error": errors[:, i] for i in range(n_folds)},
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
            + ("; the other folds not run: one candidate left" if run < n_folds else "")
            + _climb_stopped(dims, [c_d for c_d, _ in candidates])
        )
        return loss


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
