"""A choice model: an embedding fitted on judgements as they were answered (issue 57).

Where t-ETE learns from the triplets a screen implies, this model learns the choice the
person made (app/learn/choices.py): an odd-one-out as a choice among the three pairs, a
"k of n" screen as k choices in turn of the most similar among the items left, a triplet
as the two-choice case. Each alternative's probability is the softmax of the
similarities of the pairs on offer, the similarity being

- "dot": the dot product of a sparse non-negative embedding, SPoSE's form (Zheng,
  Pereira, Baker & Hebart, 2019): an L1 penalty keeps each item on few dimensions, and
  dimensions no item uses are pruned after the fit, so the fit finds its own dimension
  below `n_components`;
- "kernel": the log of a Student-t kernel of the distance, t-STE's form (van der Maaten
  & Weinberger, 2012), whose choice probability is proportional to the kernel.

Fitted in two stages, written from the papers' equations: a few stochastic passes over
the choices, each item moved by its own Adam, find the embedding's shape quickly; then
L-BFGS-B on the whole loss (with the dot form's L1 term, smooth on the non-negative
orthant, and its bounds) settles it where stochastic steps keep jittering. The sparsity
is chosen on a path from the densest candidate to the sparsest, each fit starting from
the last.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from app.learn._choice_kernels import adam_epoch, loss_and_gradient, probabilities
from app.learn.choices import Choices, triplet_choices

SIMILARITIES = ("dot", "kernel")
# The sparsities l1="auto" tries, densest first: each fit starts where the last ended.
L1_CANDIDATES = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32)
# Where the sparsest is still the best (few answers an item), the path goes on doubling
# it, this many times at most, while a dimension stays in use.
SPARSER_STEPS = 3
# The gradient is summed in this many runs of the choices, one a thread: the same runs
# (and so the same sums) whatever the machine.
CHUNKS = 16
# The sharpness a held-out calibration may give: from nearly even choices to ones five
# times as confident as the fit's own.
SHARPNESS_BOUNDS = (0.01, 5.0)
# The refit from the calibrated candidate takes this share of max_iter: enough to take
# in the held-out judgements, near enough the candidate that its sharpness still holds.
# Run to max_iter it grew too sure (the temperature fresh choices asked of it 0.61 at 400
# items and 0.72 at 1,000 of a planted "2 of 8" study; benchmarks/choice_calibration.py).
REFIT_SHARE = 0.1


def as_choices(judgements) -> Choices:
    """`Choices` as they are, or triplets (m, 3) ``(anchor, closer, farther)``."""
    if isinstance(judgements, Choices):
        return judgements
    return triplet_choices(judgements)


class ChoiceEmbedding(BaseEstimator):
    """An embedding of items fitted on the choices people made among pairs of them.

    Parameters
    ----------
    n_components : the dimensions of the first fit (the dot form prunes those no item
        uses).
    max_components : with l1="auto", where the chosen fit uses every dimension, the dot
        form tries twice as many, and again, up to this; it keeps the larger where its
        held-out log loss is lower by more than one standard error.
    similarity : "dot" (a sparse non-negative embedding's dot product, SPoSE) or
        "kernel" (a Student-t kernel of the distance, t-STE).
    l1 : the dot form's sparsity: the mean L1 norm of a judged item's row, weighted against the
        mean log loss of a choice; "auto" (default) chooses it among L1_CANDIDATES on
        held-out judgements: the sparsest whose held-out log loss is within one standard
        error of the lowest (fewer dimensions unless the answers show they cost). Each
        candidate's held-out probabilities are calibrated first (one sharpness, fitted
        on the held-out choices): on few answers an item, a fit that ranks the choices
        well is overconfident, and uncalibrated it would lose to the empty embedding.
    validation_fraction : the share of judgements (whole) "auto" holds out.
    refit : with l1="auto", fit the chosen candidate on again every answer (the default),
        for REFIT_SHARE of max_iter iterations from where it ended, and serve that with
        its sharpness; False serves the candidate as fitted on the rest and calibrated
        on the held-out share (fewer answers: benchmarks/choice_calibration.py compares
        them).
    alpha : the kernel's degrees of freedom; None: max(n_components - 1, 1), as t-STE.
    passes : stochastic passes over the choices before L-BFGS-B (Adam's, per item).
    learning_rate : their Adam's step.
    max_iter : the most L-BFGS-B iterations.
    tol : L-BFGS-B stops once an iteration lowers the loss by less than this (relative).
    prune_below : after the fit, the dot form drops each dimension whose largest weight
        is below this share of the largest weight of any.
    random_state : seed of the initial embedding, the passes' order and the held-out
        judgements.

    Attributes
    ----------
    embedding_ : (n_items, n_components_) array; for the dot form non-negative, its
        dimensions ordered by their total weight.
    n_components_ : the dimensions kept.
    loss_curve_ : the loss at each stochastic pass, then at each L-BFGS-B iteration (mean
        log loss of a choice, plus the L1 term).
    n_iter_ : L-BFGS-B iterations of the final fit.
    planned_steps_ : the most steps the fit takes, the sparsity path's included (the
        callback's count ends there).
    converged_ : whether L-BFGS-B settled before `max_iter` iterations (with l1="auto",
        whether the chosen candidate's fit did: the refit from it is a short step).
    l1_ : the sparsity fitted with.
    sharpness_ : the dot form's calibration with l1="auto" (else 1): the factor the
        chosen candidate's similarities took to fit its held-out choices best; the
        embedding's weights are scaled by its square root, so the dot products (and so the
        choice probabilities) carry it.
    selection_ : with l1="auto", what was tried and why the choice: per candidate its
        dimensions, held-out log loss (calibrated, and as fitted), accuracy and
        dimensions kept, and a sentence.
    """

    embedding_: np.ndarray
    n_components_: int
    loss_curve_: np.ndarray
    n_iter_: int
    planned_steps_: int
    converged_: bool
    alpha_: float
    l1_: float
    sharpness_: float
    selection_: dict | None

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, 1024, closed="both")],
        "max_components": [Interval(Integral, 1, 1024, closed="both")],
        "similarity": [StrOptions(set(SIMILARITIES))],
        "l1": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "refit": ["boolean"],
        "alpha": [Interval(Real, 0, None, closed="neither"), None],
        "passes": [Interval(Integral, 0, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "prune_below": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components: int = 64,
        max_components: int = 256,
        similarity: str = "dot",
        l1="auto",
        validation_fraction: float = 0.1,
        refit: bool = True,
        alpha: float | None = None,
        passes: int = 8,
        learning_rate: float = 0.01,
        max_iter: int = 300,
        tol: float = 1e-6,
        prune_below: float = 0.05,
        random_state=None,
    ) -> None:
        self.n_components = n_components
        self.max_components = max_components
        self.similarity = similarity
        self.l1 = l1
        self.validation_fraction = validation_fraction
        self.refit = refit
        self.alpha = alpha
        self.passes = passes
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.tol = tol
        self.prune_below = prune_below
        self.random_state = random_state

    @property
    def _kernel(self) -> bool:
        return self.similarity == "kernel"

    def fit(self, judgements, n_items: int | None = None, callback=None) -> ChoiceEmbedding:
        """Fit items ``0..n_items-1`` (default: the largest id named, plus one) to the
        choices (`Choices`, or triplets). `callback(step, loss)` is called after every
        stochastic pass and L-BFGS-B iteration, the sparsity path's too, counting on
        (at most `planned_steps_`); an exception it raises stops the fit."""
        self._validate_params()
        choices = as_choices(judgements)
        if len(choices) == 0:
            raise ValueError("no choices to fit")
        n = choices.n_items if n_items is None else int(n_items)
        if choices.n_items > n:
            raise ValueError(f"the choices name item {choices.n_items - 1}; n_items is {n}")
        if choices.pairs.min() < -1:
            raise ValueError("item ids must be >= 0 (-1 pads a row)")
        d = int(self.n_components)
        self.alpha_ = float(self.alpha) if self.alpha is not None else float(max(d - 1, 1))
        rng = check_random_state(self.random_state)
        self.selection_ = None
        self.sharpness_ = 1.0
        start = None
        searches = not self._kernel and self.l1 == "auto"
        # The path's first candidate makes the stochastic passes; each fit starts from the
        # last one's end after that, the wider ones too.
        refit_iterations = max(1, int(self.max_iter * REFIT_SHARE))
        self.planned_steps_ = (
            refit_iterations
            + self.passes
            + (len(L1_CANDIDATES) + SPARSER_STEPS + _doublings(d, self.max_components))
            * (self.max_iter // 3)
            if searches
            else self.max_iter + self.passes
        )
        counted = None
        if callback is not None:
            steps = [0]

            def one_more(_: int, loss: float) -> None:
                steps[0] += 1
                callback(steps[0], loss)

            counted = one_more
        if self._kernel:
            self.l1_ = 0.0
        elif self.l1 == "auto":
            chosen, start, self.selection_ = self._selected(choices, n, rng, counted)
            self.l1_, self.sharpness_ = chosen["l1"], chosen["sharpness"]
            d = chosen["dimensions"]
        else:
            self.l1_ = float(self.l1)
        if start is None:
            X, curve, iterations, settled = self._descend(
                choices, n, d, self.l1_, None, rng, counted, self.max_iter
            )
        elif self.refit:
            # A step from the candidate by design, not a fit to its end: whether the fit
            # settled is whether the candidate's did.
            X, curve, iterations, _ = self._descend(
                choices, n, d, self.l1_, start, rng, counted, refit_iterations
            )
            settled = chosen["converged"]
        else:  # the chosen candidate as it was calibrated
            X, curve, iterations, settled = start, [], 0, chosen["converged"]
        self.loss_curve_ = np.array(curve)
        self.n_iter_, self.converged_ = iterations, settled
        if self.sharpness_ != 1.0:
            # Dot products scale with the square of the weights: the calibration becomes
            # the embedding's own, and its likeness, distances and probabilities agree.
            X = X * np.sqrt(self.sharpness_)
        self.embedding_ = X if self._kernel else self._pruned(X)
        self.n_components_ = self.embedding_.shape[1]
        return self

    def _selected(
        self, choices: Choices, n: int, rng, callback
    ) -> tuple[dict, np.ndarray | None, dict]:
        """The candidate to fit with (its sparsity, dimensions and sharpness), chosen on one
        held-out share of whole judgements, and the embedding its fit ended at (where the
        final fit starts)."""
        d = int(self.n_components)
        judgements = np.unique(choices.judgement)
        count = int(len(judgements) * self.validation_fraction)
        held = np.isin(choices.judgement, rng.permutation(judgements)[:count])
        if count == 0 or held.all():
            middle = L1_CANDIDATES[len(L1_CANDIDATES) // 2]
            fallback = {"l1": middle, "dimensions": d, "sharpness": 1.0}
            return fallback, None, {"why": f"too few judgements to hold any out: l1 {middle:g}"}
        train, test = choices.take(np.flatnonzero(~held)), choices.take(np.flatnonzero(held))
        # A candidate needs the held-out loss to a few digits, not a settled fit.
        iterations = self.max_iter // 3
        tried, ends, start = [], [], None
        for l1 in L1_CANDIDATES:
            start, _, _, settled = self._descend(train, n, d, l1, start, rng, callback, iterations)
            start = _used_dimensions(start)
            ends.append(start.copy())
            tried.append(self._scored(start, test, l1, settled, d))
        for _ in range(SPARSER_STEPS):
            last = tried[-1]
            if last is not min(tried, key=lambda row: row["heldout_log_loss"]):
                break
            if ends[-1].max() <= 0:  # the penalty emptied every dimension
                break
            start, _, _, settled = self._descend(
                train, n, d, 2 * last["l1"], start, rng, callback, iterations
            )
            start = _used_dimensions(start)
            ends.append(start.copy())
            tried.append(self._scored(start, test, 2 * last["l1"], settled, d))
        best = min(tried, key=lambda row: row["heldout_log_loss"])
        bound = best["heldout_log_loss"] + best["standard_error"]
        pick = max(
            (i for i, row in enumerate(tried) if row["heldout_log_loss"] <= bound),
            key=lambda i: tried[i]["l1"],
        )
        chosen, end = tried[pick], ends[pick]
        why = (
            f"l1 {chosen['l1']:g} ({chosen['n_components']} dimensions): the sparsest within "
            f"one standard error of the lowest held-out log loss "
            f"({best['heldout_log_loss']:.4f} at l1 {best['l1']:g}, each candidate's "
            f"probabilities calibrated) on {len(test)} held-out choices"
        )
        # Every dimension in use: the answers may carry more than the first fit had room for.
        while chosen["n_components"] == chosen["dimensions"] and 2 * chosen["dimensions"] <= (
            self.max_components
        ):
            width = chosen["dimensions"]
            # The new dimensions start at the weights the old ones have: near zero they
            # would sit on a saddle (a dimension no item uses has no gradient but the L1
            # term's) and stay empty.
            used = end[end > 0]
            room = rng.uniform(
                0.0, 2 * used.mean() if len(used) else 1.0, (n, 2 * width - end.shape[1])
            )
            wider, _, _, settled = self._descend(
                train,
                n,
                2 * width,
                chosen["l1"],
                np.hstack([end, room]),
                rng,
                callback,
                iterations,
            )
            row = self._scored(wider, test, chosen["l1"], settled, 2 * width)
            tried.append(row)
            if row["heldout_log_loss"] >= chosen["heldout_log_loss"] - chosen["standard_error"]:
                why += (
                    f"; {2 * width} dimensions did not lower it by a standard error "
                    f"({row['heldout_log_loss']:.4f} against {chosen['heldout_log_loss']:.4f})"
                )
                break
            why += (
                f"; every dimension in use, {2 * width} lowered it to "
                f"{row['heldout_log_loss']:.4f} ({row['n_components']} kept)"
            )
            chosen, end = row, wider
        selection = {
            "candidates": tried,
            "chosen": chosen["l1"],
            "dimensions": chosen["dimensions"],
            "sharpness": chosen["sharpness"],
            "why": why,
        }
        return chosen, end, selection

    def _scored(self, X: np.ndarray, test: Choices, l1: float, settled: bool, width: int) -> dict:
        """A candidate embedding's held-out figures, its probabilities calibrated first;
        `width` the dimensions it was fitted with, those it left empty (dropped) included."""
        widths = test.n_alternatives.astype(np.int64)
        held_out = probabilities(X, test.pairs, widths, self._kernel, self.alpha_)
        sharpness, losses = _calibration(held_out, widths)
        fitted = -np.log(np.maximum(held_out[:, 0], 1e-300))
        return {
            "l1": l1,
            "dimensions": width,
            "heldout_log_loss": float(losses.mean()),
            "standard_error": float(losses.std(ddof=1) / np.sqrt(len(losses))),
            "fitted_heldout_log_loss": float(fitted.mean()),
            "sharpness": sharpness,
            "heldout_choice_accuracy": _accuracy(held_out),
            "n_components": self._pruned(X).shape[1],
            "converged": settled,
        }

    def _descend(
        self, choices: Choices, n: int, d: int, l1: float, start, rng, callback, iterations: int
    ):
        """(embedding, loss curve, L-BFGS-B iterations, settled): stochastic passes from a
        random start of `d` dimensions (none from `start`), then at most `iterations` of
        L-BFGS-B."""
        kernel = self._kernel
        widths = choices.n_alternatives.astype(np.int64)
        count = len(choices)
        curve: list[float] = []
        # Items past the last one named (a project's newest, unasked) appear nowhere.
        appearances = np.pad(choices.appearances, (0, n - choices.n_items))
        # The L1 term is the mean row norm of the items judged: rows nobody chose among
        # go to zero whatever it is, and a project's unasked items must not thin it.
        judged = max(int(np.count_nonzero(appearances)), 1)
        if start is None:
            if kernel:
                X = rng.standard_normal((n, d)) * 0.1
            else:
                # Dot products of about 1 to start: each weight uniform below 2 / sqrt(d).
                X = rng.uniform(0.0, 2.0 / np.sqrt(d), (n, d))
            # The L1 term spread over each item's appearances.
            penalty = l1 * count / (judged * np.maximum(appearances, 1).astype(float))
            first, second = np.zeros_like(X), np.zeros_like(X)
            steps = np.zeros(n, dtype=np.int64)
            for _ in range(self.passes):
                loss = adam_epoch(
                    X,
                    choices.pairs,
                    widths,
                    rng.permutation(count),
                    float(self.learning_rate),
                    first,
                    second,
                    steps,
                    penalty,
                    kernel,
                    self.alpha_,
                )
                if not np.isfinite(loss):
                    raise FloatingPointError("the stochastic passes diverged: lower learning_rate")
                curve.append(float(loss))
                if callback is not None:
                    callback(len(curve), float(loss))
        else:
            X = np.array(start, dtype=float)
            d = X.shape[1]

        last = [np.nan]
        # L-BFGS-B's tests are absolute: on the mean over choices an item's gradient
        # shrinks as the items grow (50,000 items: it stopped where it began). Scaled to
        # the items judged, a row's gradient is about its own choices' mean at any size.
        per_item = count / judged

        def objective(flat: np.ndarray) -> tuple[float, np.ndarray]:
            Y = flat.reshape(n, d)
            loss, gradient = loss_and_gradient(
                Y, choices.pairs, widths, kernel, self.alpha_, CHUNKS
            )
            last[0] = loss / count + l1 * Y.sum() / judged
            return per_item * last[0], (per_item * (gradient / count + l1 / judged)).ravel()

        def iterated(flat: np.ndarray) -> None:
            # The line search ends on the point it accepts: its loss was the last one.
            curve.append(float(last[0]))
            if callback is not None:
                callback(len(curve), curve[-1])

        if iterations == 0:
            return X, curve, 0, False
        result = minimize(
            objective,
            X.ravel(),
            jac=True,
            method="L-BFGS-B",
            bounds=None if kernel else [(0.0, None)] * X.size,
            callback=iterated,
            options={"maxiter": iterations, "ftol": float(self.tol)},
        )
        return result.x.reshape(n, d), curve, int(result.nit), bool(result.success)

    def _pruned(self, X: np.ndarray) -> np.ndarray:
        """The dimensions some item uses, heaviest first (at least one)."""
        largest = X.max(axis=0)
        kept = np.flatnonzero(largest >= self.prune_below * largest.max())
        if largest.max() <= 0:
            # The penalty emptied every dimension: a dimension of zeros, every choice even.
            kept = np.array([0])
        kept = kept[np.argsort(-X[:, kept].sum(axis=0), kind="stable")]
        return np.ascontiguousarray(X[:, kept])

    def predict_proba(self, judgements) -> np.ndarray:
        """(c, width): each alternative's probability of being chosen, in the choices'
        order (the one chosen first; 0 for padding)."""
        check_is_fitted(self, "embedding_")
        choices = as_choices(judgements)
        if choices.n_items > len(self.embedding_):
            raise ValueError(
                f"the choices name item {choices.n_items - 1}; the model knows "
                f"{len(self.embedding_)} items"
            )
        return probabilities(
            self.embedding_,
            choices.pairs,
            choices.n_alternatives.astype(np.int64),
            self._kernel,
            self.alpha_,
        )

    def score(self, judgements) -> float:
        """Choice accuracy: the share of choices whose chosen alternative the model finds
        the most probable (a tie counts as a share of a hit)."""
        return _accuracy(self.predict_proba(judgements))

    def log_loss(self, judgements) -> float:
        """Mean negative log probability of the choices made."""
        p = self.predict_proba(judgements)[:, 0]
        return float(-np.mean(np.log(np.maximum(p, 1e-300))))


def _used_dimensions(X: np.ndarray) -> np.ndarray:
    """X without the dimensions no item uses (at least one kept). Such a dimension is a
    saddle the fit never leaves (its gradient is the other items' zeros), so the next
    candidate loses nothing and its passes over the choices cost less."""
    used = X.max(axis=0) > 0
    if not used.any():
        used[0] = True
    return np.ascontiguousarray(X[:, used])


def _doublings(first: int, most: int) -> int:
    """How many times the dimensions can double from `first` without passing `most`."""
    count = 0
    while 2 * first <= most:
        first, count = 2 * first, count + 1
    return count


def _log_probabilities(p: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """log p, -inf on each row's padding (an alternative is never quite impossible)."""
    offered = np.arange(p.shape[1])[None, :] < widths[:, None]
    return np.where(offered, np.log(np.maximum(p, 1e-300)), -np.inf)


def _calibration(p: np.ndarray, widths: np.ndarray) -> tuple[float, np.ndarray]:
    """The sharpness (the power the probabilities are raised to, then normalised) that
    gives the chosen alternatives the lowest mean log loss, and each choice's loss at it:
    temperature scaling, the whole calibration one number can do."""
    log_p = _log_probabilities(p, widths)

    def losses(sharpness: float) -> np.ndarray:
        z = sharpness * log_p
        top = z.max(axis=1)
        return top + np.log(np.exp(z - top[:, None]).sum(axis=1)) - z[:, 0]

    found = minimize_scalar(
        lambda sharpness: float(losses(sharpness).mean()),
        bounds=SHARPNESS_BOUNDS,
        method="bounded",
        options={"xatol": 1e-3},
    )
    sharpness = float(found.x)
    return sharpness, losses(sharpness)


def _accuracy(p: np.ndarray) -> float:
    """The share of rows whose first alternative is the most probable, a tie a share."""
    if len(p) == 0:
        return float("nan")
    top = p.max(axis=1, keepdims=True)
    best = np.isclose(p, top, rtol=1e-12, atol=0) & (p > 0)
    return float(np.mean(best[:, 0] / best.sum(axis=1)))
