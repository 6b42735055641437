"""What a learner kind is: the protocol each kind's module (app/training/kinds/<name>.py)
implements, once. Training, serving, the model cards, the archive and the workspace ask
the kind; none of them names one.

A kind says what it needs (its parameters, answers, item features, a build), how it fits
from a snapshot (app/training/fitting.py), what it serves (labels, an embedding,
distances and neighbours, labels for new items by their answers or their features) and
what its card offers. Its fitted artifact (app/training/fitted.py) carries the kind's
name: stored artifacts stay readable as kinds change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel

from app.models import ModelKind
from app.training.fitted import Fitted, ItemPredictions
from app.training.fitting import CannotFit

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.models import LearnedModel
    from app.training.fitting import FitOutcome, Progress, Snapshot

# A project's newest ready fit of a model (by id), for a kind that learns from another.
ReadyFit = Callable[[int], Fitted | None]


class LearnerKind:
    kind: ClassVar[ModelKind]
    # "t-ETE" in messages; "t-ETE embedding" where the workspace lists the kinds.
    label: ClassVar[str]
    title: ClassVar[str]
    params: ClassVar[type[BaseModel]]
    # The fewest answers a fit can learn from (the service asks before queueing one).
    answers_needed: ClassVar[int | None] = None
    # Refits by itself as answers grow.
    passive: ClassVar[bool] = False
    learns_from_features: ClassVar[bool] = False
    # A build's forest (CompRF): it follows its build, routes items, and is never fitted.
    from_build: ClassVar[bool] = False
    # What it serves beside labels: distances and neighbours; coordinates for the items.
    serves_distances: ClassVar[bool] = False
    serves_embedding: ClassVar[bool] = False
    # Its embedding places items by their answers: another model may learn from it.
    embeds_answers: ClassVar[bool] = False
    # How it labels an item not in the project: by its answers against known items, or
    # by its features.
    places_new_items_by: ClassVar[Literal["answers", "features"] | None] = None
    # What the adaptive samplers (app/adaptive) read of its newest fit: "embedding" (its
    # coordinates, where items are placed), "class_shares" (what it believes of each
    # item's class; a model of it makes the labelling sampler ask even before a fit).
    informs_samplers: ClassVar[Literal["embedding", "class_shares"] | None] = None
    # It gives the probability of each choice on a screen (POST …/choices).
    predicts_choices: ClassVar[bool] = False
    # What measures asking actively against at random when it is refitted on each arm's
    # first answers (GET …/gain: app/training/gain.py): its distances' error on held-out
    # answers, or its labels' error on the test split's items.
    active_gain_measure: ClassVar[Literal["heldout_triplet_error", "test_label_error"] | None] = (
        None
    )
    # Why an item has no distance in it (a request naming one is refused).
    uncovered: ClassVar[str] = "have no features"

    @property
    def name(self) -> str:
        return self.kind.value

    def __repr__(self) -> str:
        return f"<learner kind {self.name}>"

    def fit(
        self,
        snapshot: Snapshot,
        params: dict[str, Any],
        previous: Fitted | None,
        progress: Progress,
    ) -> FitOutcome:
        """A fit on the snapshot (`previous`: the model's last fitted version, to warm
        start from where it is of this kind)."""
        raise NotImplementedError(f"a {self.label} model is not fitted")

    def as_chosen(self, params: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
        """The parameters with what a version chose (its metrics) in place of each
        'auto': what the gain refits each arm's first answers with, so that its curves
        compare the answers and not choices made again on fewer of them. A kind that
        chooses nothing: as given."""
        return dict(params)

    def require_answers(self, snapshot: Snapshot) -> None:
        """Refuse a fit on fewer answers than `answers_needed` (the service asks first; a
        fit reads the answers again, which exclusions may have thinned since)."""
        needed = self.answers_needed or 0
        if len(snapshot.answers) < needed:
            raise CannotFit(
                f"{self.label} needs at least {needed} answers; the project has "
                f"{len(snapshot.answers)}"
            )

    def predict_new(
        self, fitted: Fitted, given: np.ndarray, count: int
    ) -> tuple[ItemPredictions, np.ndarray | None]:
        """Labels for `count` new items from `given`: their triplets against known items
        (positions, new items numbered from n) or their features; with their coordinates
        where it places them in its embedding."""
        raise NotImplementedError(f"a {self.label} model labels no new items")

    def takes_matrix(self, params: dict[str, Any]) -> bool:
        """Whether a model with these parameters learns from an uploaded matrix."""
        return False

    # The parameter naming another model of the project it learns from: an archive makes
    # it this server's id, and that model stays while this one names it.
    model_reference: ClassVar[str | None] = None

    def referenced_model(self, params: dict[str, Any]) -> object | None:
        """The other model these parameters name (as given), or None."""
        return None

    def add_inputs(
        self, session: Session, model: LearnedModel, snapshot: Snapshot, ready_fit: ReadyFit
    ) -> None:
        """Put what a fit reads beside the answers into the snapshot."""
