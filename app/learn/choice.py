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

Fitted by stochastic passes over the choices with row-wise AdaGrad, written from the
papers' equations.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from app.learn._choice_kernels import probabilities, sgd_epoch
from app.learn.choices import Choices, triplet_choices

SIMILARITIES = ("dot", "kernel")
# The sparsities l1="auto" tries, sparsest last.
L1_CANDIDATES = (0.02, 0.05, 0.1, 0.2, 0.4)


def as_choices(judgements) -> Choices:
    """`Choices` as they are, or triplets (m, 3) ``(anchor, closer, farther)``."""
    if isinstance(judgements, Choices):
        return judgements
    return triplet_choices(judgements)


class ChoiceEmbedding(BaseEstimator):
    """An embedding of items fitted on the choices people made among pairs of them.

    Parameters
    ----------
    n_components : the most dimensions (the dot form prunes those no item uses).
    similarity : "dot" (a sparse non-negative embedding's dot product, SPoSE) or
        "kernel" (a Student-t kernel of the distance, t-STE).
    l1 : the dot form's sparsity: the mean L1 norm of an item's row, weighted against the
        mean log loss of a choice; "auto" (default) chooses it among L1_CANDIDATES on
        held-out judgements: the sparsest whose held-out log loss is within one standard
        error of the lowest (fewer dimensions unless the answers show they cost).
    validation_fraction : the share of judgements (whole) "auto" holds out.
    alpha : the kernel's degrees of freedom; None: max(n_components - 1, 1), as t-STE.
    max_iter : the most passes over the choices.
    learning_rate : row-wise AdaGrad's rate.
    tol, n_iter_no_change : stop once a pass has lowered the mean log loss by less than
        `tol` (relative) for `n_iter_no_change` passes in a row.
    prune_below : after the fit, the dot form drops each dimension whose largest weight
        is below this share of the largest weight of any.
    random_state : seed of the initial embedding and of the passes' order.

    Attributes
    ----------
    embedding_ : (n_items, n_components_) array; for the dot form non-negative, its
        dimensions ordered by their total weight.
    n_components_ : the dimensions kept.
    loss_curve_ : mean log loss of a choice in each pass (before its updates).
    n_iter_ : passes made.
    converged_ : whether the fit settled before `max_iter` passes.
    l1_ : the sparsity fitted with.
    selection_ : with l1="auto", what was tried and why the choice: per candidate its
        held-out log loss, accuracy and dimensions kept, and a sentence.
    """

    embedding_: np.ndarray
    n_components_: int
    loss_curve_: np.ndarray
    n_iter_: int
    converged_: bool
    alpha_: float
    l1_: float
    selection_: dict | None

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, 1024, closed="both")],
        "similarity": [StrOptions(set(SIMILARITIES))],
        "l1": [Interval(Real, 0, None, closed="left"), StrOptions({"auto"})],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "alpha": [Interval(Real, 0, None, closed="neither"), None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "prune_below": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components: int = 64,
        similarity: str = "dot",
        l1="auto",
        validation_fraction: float = 0.1,
        alpha: float | None = None,
        max_iter: int = 200,
        learning_rate: float = 0.1,
        tol: float = 1e-3,
        n_iter_no_change: int = 3,
        prune_below: float = 0.05,
        random_state=None,
    ) -> None:
        self.n_components = n_components
        self.similarity = similarity
        self.l1 = l1
        self.validation_fraction = validation_fraction
        self.alpha = alpha
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.prune_below = prune_below
        self.random_state = random_state

    @property
    def _kernel(self) -> bool:
        return self.similarity == "kernel"

    def fit(self, judgements, n_items: int | None = None, callback=None) -> ChoiceEmbedding:
        """Fit items ``0..n_items-1`` (default: the largest id named, plus one) to the
        choices (`Choices`, or triplets). `callback(pass, loss)` is called after every
        pass; an exception it raises stops the fit."""
        self._validate_params()
        choices = as_choices(judgements)
        if len(choices) == 0:
            raise ValueError("no choices to fit")
        n = choices.n_items if n_items is None else int(n_items)
        if choices.n_items > n:
            raise ValueError(f"the choices name item {choices.n_items - 1}; n_items is {n}")
        if choices.pairs.min() < -1:
            raise ValueError("item ids must be >= 0 (-1 pads a row)")
        self.selection_ = None
        if self._kernel:
            self.l1_ = 0.0
        elif self.l1 == "auto":
            self.l1_, self.selection_ = self._chosen_l1(choices, n)
        else:
            self.l1_ = float(self.l1)
        return self._fit(choices, n, callback)

    def _chosen_l1(self, choices: Choices, n: int) -> tuple[float, dict]:
        """The sparsity to fit with, chosen on one held-out share of whole judgements."""
        judgements = np.unique(choices.judgement)
        rng = check_random_state(self.random_state)
        held_out = rng.permutation(judgements)[
            : max(1, int(len(judgements) * self.validation_fraction))
        ]
        held = np.isin(choices.judgement, held_out)
        if held.all() or not held.any():
            return L1_CANDIDATES[len(L1_CANDIDATES) // 2], {
                "why": "too few judgements to hold any out: the middle sparsity"
            }
        train, test = choices.take(np.flatnonzero(~held)), choices.take(np.flatnonzero(held))
        tried = []
        for l1 in L1_CANDIDATES:
            model = clone(self).set_params(l1=l1)
            model.l1_ = l1
            model._fit(train, n, None)
            losses = -np.log(np.maximum(model.predict_proba(test)[:, 0], 1e-300))
            tried.append(
                {
                    "l1": l1,
                    "heldout_log_loss": float(losses.mean()),
                    "standard_error": float(losses.std(ddof=1) / np.sqrt(len(losses))),
                    "heldout_choice_accuracy": model.score(test),
                    "n_components": model.n_components_,
                }
            )
        best = min(tried, key=lambda row: row["heldout_log_loss"])
        bound = best["heldout_log_loss"] + best["standard_error"]
        chosen = max(
            (row for row in tried if row["heldout_log_loss"] <= bound), key=lambda r: r["l1"]
        )
        why = (
            f"l1 {chosen['l1']:g} ({chosen['n_components']} dimensions): the sparsest within one "
            f"standard error of the lowest held-out log loss ({best['heldout_log_loss']:.4f} at "
            f"l1 {best['l1']:g}) on {len(test)} held-out choices"
        )
        return chosen["l1"], {"candidates": tried, "chosen": chosen["l1"], "why": why}

    def _fit(self, choices: Choices, n: int, callback) -> ChoiceEmbedding:
        """The fit itself, with `l1_` set."""
        d = int(self.n_components)
        rng = check_random_state(self.random_state)
        kernel = self._kernel
        self.alpha_ = float(self.alpha) if self.alpha is not None else float(max(d - 1, 1))
        if kernel:
            X = rng.standard_normal((n, d)) * 0.1
            penalty = np.zeros(n)
        else:
            # Dot products of about 1 to start: each weight uniform below 2 / sqrt(d).
            X = rng.uniform(0.0, 2.0 / np.sqrt(d), (n, d))
            # The L1 term (l1 times the mean row norm) spread over each item's
            # appearances, on the scale of one choice's log loss.
            appearances = np.bincount(
                choices.pairs[choices.pairs >= 0].ravel(), minlength=n
            ).astype(float)
            penalty = self.l1_ * len(choices) / (n * np.maximum(appearances, 1.0))
        widths = choices.n_alternatives.astype(np.int64)
        squares = np.zeros(n)
        curve: list[float] = []
        calm = 0
        self.converged_ = False
        for done in range(1, self.max_iter + 1):
            order = rng.permutation(len(choices))
            loss = sgd_epoch(
                X,
                choices.pairs,
                widths,
                order,
                float(self.learning_rate),
                squares,
                penalty,
                kernel,
                self.alpha_,
            )
            if not np.isfinite(loss):
                raise FloatingPointError(f"the fit diverged at pass {done}: lower learning_rate")
            if curve and curve[-1] - loss < self.tol * abs(curve[-1]):
                calm += 1
            else:
                calm = 0
            curve.append(float(loss))
            if callback is not None:
                callback(done, float(loss))
            if calm >= self.n_iter_no_change:
                self.converged_ = True
                break
        self.n_iter_ = len(curve)
        self.loss_curve_ = np.array(curve)
        self.embedding_ = X if kernel else self._pruned(X)
        self.n_components_ = self.embedding_.shape[1]
        return self

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
        p = self.predict_proba(judgements)
        if len(p) == 0:
            return float("nan")
        top = p.max(axis=1, keepdims=True)
        best = np.isclose(p, top, rtol=1e-12, atol=0) & (p > 0)
        return float(np.mean(best[:, 0] / best.sum(axis=1)))

    def log_loss(self, judgements) -> float:
        """Mean negative log probability of the choices made."""
        p = self.predict_proba(judgements)[:, 0]
        return float(-np.mean(np.log(np.maximum(p, 1e-300))))
