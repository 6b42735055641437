"""The choice model (issue 57): an embedding fitted on the judgements as the raters made
them (app/learn/choice.py), not on the triplets they imply: an odd-one-out as one choice
among three pairs, a "k of n" screen as k choices in turn, a triplet as a choice of two.
Its sparsity, and with it its dimension, is chosen on held-out screens. It serves
coordinates, distances and neighbours (by its own likeness: for the sparse form the dot
product), the probability of each choice on a screen, and labels items by their nearest
labelled neighbours."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from app import learn
from app.formats import named
from app.formats.registry import every as every_format
from app.learn.choices import Choices, triplet_choices
from app.models import ModelKind
from app.training import fitting
from app.training.fitted import Fitted, required_part
from app.training.fitting import FitOutcome, Progress, Snapshot
from app.training.kinds.base import LearnerKind, ReadyFit
from app.training.schemas import ChoiceParams
from app.triplets.judged import AnsweredScreens, answered_screens
from app.triplets.log import item_positions

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.models import LearnedModel


def screen_choices(
    item_ids: np.ndarray,
    answers: np.ndarray,
    groups: np.ndarray,
    screens: list[AnsweredScreens],
) -> tuple[Choices, dict[str, int]]:
    """Every answer as a choice its person made: the `screens` (judgements of formats
    learned whole) as their choices, the other answers as their triplets; and how many
    screens of each format were learned whole. A screen naming an item no longer in the
    project is learned as the triplets left of it."""
    parts: list[Choices] = []
    whole: list[np.ndarray] = []
    counts: dict[str, int] = defaultdict(int)
    for batch in screens:
        judgement_format = named(batch.format)
        reference = batch.shown[:, :1] if batch.references is None else batch.references[:, None]
        block = np.concatenate([reference, batch.shown, batch.chosen], axis=1)
        positions, known = item_positions(item_ids, block)
        if not known.any():
            continue
        positions, ids = positions[known], batch.ids[known]
        n = batch.shown.shape[1]
        made = judgement_format.implied_choices(
            None if batch.references is None else positions[:, 0],
            positions[:, 1 : 1 + n],
            positions[:, 1 + n :],
        )
        parts.append(Choices(made.pairs, ids[made.judgement]))
        whole.append(ids)
        counts[batch.format] += len(ids)
    taken = np.concatenate(whole) if whole else np.empty(0, np.int64)
    rest = np.flatnonzero(~np.isin(groups, taken))
    if len(rest):
        single = triplet_choices(answers[rest])
        parts.append(Choices(single.pairs, groups[rest]))
    return Choices.join(*parts, renumber=False), dict(counts)


def fit_choice(
    snapshot: Snapshot, params: dict[str, Any], previous: Fitted | None, progress: Progress
) -> FitOutcome:
    answers = snapshot.answers
    choices = required_part(snapshot.choices)
    seed = params.get("random_state", 0)
    n = len(snapshot.item_ids)
    groups = snapshot.answer_groups()
    # Held out: whole screens, asked at random (an adaptively chosen one is fitted only).
    unbiased = None if snapshot.adaptive is None else ~snapshot.adaptive
    fit_rows, held_rows = fitting.heldout_split(
        len(answers), params.get("heldout_share", 0.1), seed, unbiased, snapshot.groups
    )
    held = np.isin(choices.judgement, groups[held_rows])
    train, test = choices.take(np.flatnonzero(~held)), choices.take(np.flatnonzero(held))
    model = learn.ChoiceEmbedding(
        n_components=params.get("n_components", 64),
        max_components=params.get("max_components", 256),
        similarity=params.get("similarity", "dot"),
        l1=params.get("l1", "auto"),
        passes=params.get("passes", 8),
        max_iter=params.get("max_iter", 300),
        random_state=seed,
    )
    searching = model.similarity == "dot" and model.l1 == "auto"

    def step(number: int, loss: float) -> None:
        planned = model.planned_steps_
        stage = "choosing the sparsity, then fitting" if searching else "fitting"
        progress(min(number / planned, 1.0), f"{stage}: step {number} of at most {planned}")

    model.fit(train, n_items=n, callback=step)
    embedding = model.embedding_
    metrics: dict[str, Any] = {
        "similarity": model.similarity,
        "n_components": int(model.n_components_),
        "l1": float(model.l1_),
        "choices": len(choices),
        "heldout_choices": len(test),
        "training_choice_accuracy": model.score(train),
        "steps": int(len(model.loss_curve_)),
        "converged": bool(model.converged_),
    }
    if snapshot.screens_learned_whole:
        metrics["screens_learned_whole"] = snapshot.screens_learned_whole
    notes = []
    if len(test):
        metrics["heldout_choice_accuracy"] = model.score(test)
        metrics["heldout_log_loss"] = model.log_loss(test)
        metrics["heldout_triplet_error"] = 1.0 - model.score(triplet_choices(answers[held_rows]))
        # Guessing uniformly among each choice's alternatives: a fit that does no better
        # learned nothing it can use (too few answers an item), and says so.
        chance = float(np.log(test.n_alternatives).mean())
        metrics["chance_log_loss"] = chance
        if metrics["heldout_log_loss"] >= chance:
            notes.append(
                f"held-out log loss {metrics['heldout_log_loss']:.3f} is no better than "
                f"guessing ({chance:.3f}): too few answers an item to learn the choices from; "
                "it serves, but trust it only once more answers come"
            )
    if model.selection_ is not None:
        metrics["selection"] = model.selection_
        notes.append(model.selection_["why"])
    widest = (
        int(model.n_components)
        if model.selection_ is None
        else model.selection_.get("dimensions", int(model.n_components))
    )
    grew_no_further = model.l1 == "auto" and 2 * widest <= model.max_components
    if model.similarity == "dot" and model.n_components_ == widest and not grew_no_further:
        notes.append(
            f"every one of the {widest} dimensions is in use: the answers may support more; "
            + (
                "fit again with a larger max_components"
                if model.l1 == "auto"
                else "fit again with a larger n_components, or l1 'auto'"
            )
        )
    if not model.converged_:
        # Where candidates were tried, converged_ is the chosen one's fit's, which has a
        # third of max_iter (the refit from it is a short step by design).
        stopped = (
            f"the chosen candidate's fit stopped at max_iter / 3 ({model.max_iter // 3} "
            "L-BFGS iterations)"
            if "candidates" in (model.selection_ or {})
            else f"stopped at max_iter ({model.max_iter} L-BFGS iterations)"
        )
        notes.append(f"not converged: {stopped}; raise max_iter for a settled embedding")
    answered = np.unique(train.pairs[train.pairs >= 0])
    metrics["items_answered"] = len(answered)
    if unbiased is not None and not unbiased.all():
        adaptive = int((~unbiased).sum())
        metrics["adaptive_answers"] = adaptive
        notes.append(
            f"held-out screens only among those asked at random; the {adaptive} answers to "
            "adaptively chosen ones are fitted only"
        )
    dot = model.similarity == "dot"
    fitted = Fitted(
        kind=ModelKind.choice.value,
        item_ids=snapshot.item_ids,
        keys=snapshot.keys,
        estimator=model,
        coordinates=embedding,
        k_neighbors=params.get("k_neighbors", 5),
        answered=answered,
        heldout_answer_ids=snapshot.answer_ids[held_rows],
        similarity="dot" if dot else None,
        dot_offset=float((embedding**2).sum(axis=1).max()) if dot else 0.0,
    )
    fitting.label_by_neighbours(snapshot, fitted, metrics, seed)
    return FitOutcome(fitted, metrics, len(fit_rows), len(held_rows), notes)


class ChoiceKind(LearnerKind):
    kind = ModelKind.choice
    label = "choice model"
    title = "Choice model (judgements as answered)"
    params = ChoiceParams
    # It holds whole screens out to choose its sparsity.
    answers_needed = 20
    passive = True
    serves_distances = True
    serves_embedding = True
    predicts_choices = True
    active_gain_measure = "heldout_triplet_error"
    uncovered = (
        "had no answers when this version was fitted, so they have no place in the embedding"
    )

    def fit(self, snapshot, params, previous, progress) -> FitOutcome:
        self.require_answers(snapshot)
        return fit_choice(snapshot, params, previous, progress)

    def as_chosen(self, params, metrics):
        fixed = dict(params)
        if fixed.get("l1", "auto") == "auto" and "l1" in metrics:
            # The chosen candidate's sparsity, from as many dimensions as it started with.
            fixed["l1"] = float(metrics["l1"])
            chosen = metrics.get("selection", {}).get("dimensions", metrics["n_components"])
            fixed["n_components"] = int(chosen)
        return fixed

    def add_inputs(
        self, session: Session, model: LearnedModel, snapshot: Snapshot, ready_fit: ReadyFit
    ) -> None:
        """The screens of formats learned whole, read beside their triplets."""
        groups = snapshot.answer_groups()
        judgement_ids = np.unique(groups[groups > 0])
        formats = [each.name for each in every_format() if each.learned_whole]
        screens = answered_screens(session, model.project_id, judgement_ids, formats)
        snapshot.choices, snapshot.screens_learned_whole = screen_choices(
            snapshot.item_ids, snapshot.answers, groups, screens
        )


CHOICE_KIND = ChoiceKind()
