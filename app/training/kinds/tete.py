"""t-ETE: an embedding of the items from the raters' answers (its dimension and loss
chosen on held-out answers unless given), refitted as they grow from where the last one
left the items; it serves coordinates, distances and neighbours, and labels items by
their nearest labelled neighbours, new ones placed by their answers."""

from __future__ import annotations

from typing import Any

import numpy as np

from app import learn
from app.models import ModelKind
from app.training import fitting
from app.training.fitted import Fitted, required_part
from app.training.fitting import FitOutcome, Progress, Snapshot
from app.training.kinds.base import LearnerKind
from app.training.schemas import LOSS_NAMES, TETEParams


def fit_tete(
    snapshot: Snapshot, params: dict[str, Any], previous: Fitted | None, progress: Progress
) -> FitOutcome:
    answers = snapshot.answers
    seed = params.get("random_state", 0)
    n = len(snapshot.item_ids)
    dimension, t = params.get("n_components", "auto"), params.get("t", "auto")
    named = isinstance(t, str) and t != "auto"
    plain = learn.TETE(
        n_components=2 if dimension == "auto" else dimension,
        t=None if t == "auto" or named else t,
        loss=t if named else None,
        max_iter=params.get("max_iter", 1000),
        tol=params.get("tol", 1e-5),
        n_iter_no_change=params.get("n_iter_no_change", 200),
        optimizer=params.get("optimizer", "gd"),
        random_state=seed,
    )
    chooses = "auto" in (t, dimension)
    model: learn.TETE | learn.TETESearch = plain
    if chooses:
        # "auto" chooses among the search's own candidates; a given value stays fixed.
        model = learn.TETESearch(plain, cv=params.get("cv", 3))
        if t != "auto":
            model.set_params(losses=None)
        if dimension != "auto":
            model.set_params(dimensions=None)
    share = params.get("heldout_share")
    share = (0.0 if chooses else 0.1) if share is None else share
    # Held-out errors are measured on answers to uniformly random questions only.
    unbiased = None if snapshot.adaptive is None else ~snapshot.adaptive
    fit_rows, held_rows = fitting.heldout_split(
        len(answers), share, seed, unbiased, snapshot.groups
    )
    init = None
    notes = []
    if previous is not None and previous.kind == ModelKind.tete and params.get("warm_start", True):
        coordinates = required_part(previous.coordinates)
        d = coordinates.shape[1]
        if dimension in ("auto", d):
            init = np.random.default_rng(seed).standard_normal((n, d))
            # Items known last time start where they were; new ones near the centre.
            init *= coordinates.std() * 0.1
            known = np.searchsorted(previous.item_ids, snapshot.item_ids)
            known = np.minimum(known, len(previous.item_ids) - 1)
            same = previous.item_ids[known] == snapshot.item_ids
            init[same] = coordinates[known[same]]
            notes.append("warm start from the previous version's embedding")

    def step(number: int, loss: float) -> None:
        planned = model.planned_steps_
        stage = "choosing the dimension and loss, then fitting" if chooses else "fitting"
        progress(min(number / planned, 1.0), f"{stage}: step {number} of at most {planned}")

    if isinstance(model, learn.TETESearch):
        model.fit(
            answers[fit_rows],
            n_items=n,
            init=init,
            callback=step,
            unbiased=None if unbiased is None else unbiased[fit_rows],
            groups=None if snapshot.groups is None else snapshot.groups[fit_rows],
        )
    else:
        model.fit(answers[fit_rows], n_items=n, init=init, callback=step)
    embedding = model.embedding_
    metrics: dict[str, Any] = {
        "training_triplet_error": learn.triplet_error(embedding, answers[fit_rows]),
        "steps": int(model.n_iter_),
        "converged": bool(model.converged_),
        "n_components": int(model.n_components_),
        "loss": model.loss_,
        "t": model.t_,
    }
    results = model.cv_results_ if isinstance(model, learn.TETESearch) else None
    if isinstance(model, learn.TETESearch) and results is not None:
        best = model.best_index_
        metrics["selection"] = {
            "candidates": [
                {
                    "loss": candidate["loss"],
                    "n_components": int(candidate["n_components"]),
                    "heldout_triplet_error": float(results["mean_test_error"][row]),
                    "std": float(results["std_test_error"][row]),
                    "folds": int(results["folds_tried"][row]),
                }
                for row, candidate in enumerate(results["params"])
            ],
            "chosen": {"loss": model.loss_, "n_components": int(model.n_components_)},
            "folds": int(model.cv),
            # fewer where the first fold left one candidate standing
            "folds_run": int(results["folds_tried"].max()),
            "why": model.selection_,
        }
        metrics["cv_triplet_error"] = float(results["mean_test_error"][best])
        notes.append(model.selection_)
    elif isinstance(model, learn.TETESearch):
        notes.append(model.selection_)
    if not model.converged_:
        steps = int(model.n_iter_)
        # A line is fitted again after each unfolding, each fit up to max_iter steps.
        again = (
            f"; a line is fitted again after it is unfolded: {steps} in all"
            if steps > plain.max_iter
            else ""
        )
        notes.append(
            f"not converged: stopped at max_iter ({plain.max_iter} steps{again}) while the "
            "loss was still falling; raise max_iter (or tol) for a settled embedding"
        )
    if len(held_rows):
        metrics["heldout_triplet_error"] = learn.triplet_error(embedding, answers[held_rows])
    elif "cv_triplet_error" in metrics:
        # Every answer went into the fit: the cross-validated error is the held-out one.
        metrics["heldout_triplet_error"] = metrics["cv_triplet_error"]
    answered = np.unique(answers[fit_rows])
    metrics["items_answered"] = len(answered)
    if unbiased is not None and not unbiased.all():
        adaptive = int((~unbiased).sum())
        metrics["adaptive_answers"] = adaptive
        notes.append(
            f"held-out errors on the {len(answers) - adaptive} answers to uniformly random "
            f"questions; the {adaptive} to adaptively chosen ones (builds, proposals) are "
            "fitted only"
        )
    fitted = Fitted(
        kind=ModelKind.tete.value,
        item_ids=snapshot.item_ids,
        keys=snapshot.keys,
        estimator=model,
        coordinates=embedding,
        k_neighbors=params.get("k_neighbors", 5),
        answered=answered,
        heldout_answer_ids=snapshot.answer_ids[held_rows],
    )
    fitting.label_by_neighbours(snapshot, fitted, metrics, seed)
    return FitOutcome(fitted, metrics, len(fit_rows), len(held_rows), notes)


class TETEKind(LearnerKind):
    kind = ModelKind.tete
    label = "t-ETE"
    title = "t-ETE embedding"
    params = TETEParams
    # It holds a share out to choose its scale.
    answers_needed = 10
    active_gain_measure = "heldout_triplet_error"
    passive = True
    serves_distances = True
    serves_embedding = True
    embeds_answers = True
    informs_samplers = "embedding"
    places_new_items_by = "answers"
    uncovered = (
        "had no answers when this version was fitted, so they have no place in the embedding"
    )

    def fit(self, snapshot, params, previous, progress) -> FitOutcome:
        self.require_answers(snapshot)
        return fit_tete(snapshot, params, previous, progress)

    def as_chosen(self, params, metrics):
        fixed = dict(params)
        if fixed.get("n_components", "auto") == "auto" and "n_components" in metrics:
            fixed["n_components"] = int(metrics["n_components"])
        if fixed.get("t", "auto") == "auto" and "loss" in metrics:
            # A named loss by its name (STE, SOE: no temperature says them), else its t.
            loss = metrics["loss"]
            fixed["t"] = loss if loss in LOSS_NAMES else float(metrics["t"])
        return fixed

    def predict_new(self, fitted, given, count):
        points = fitted.estimator.place(given, count)
        return fitted.labels_from_coordinates(points), points


TETE_KIND = TETEKind()
