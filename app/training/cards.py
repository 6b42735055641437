"""What the workspace shows of each model, and the rules that decide what it offers:
computed here, so a template only shows them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.builds import routing
from app.models import (
    LearnedModel,
    ModelVersion,
    Project,
    Routing,
    RoutingStatus,
    VersionStatus,
)
from app.training import kinds
from app.training.kinds import LearnerKind
from app.training.service import (
    UNFINISHED,
    list_models,
    version_progress,
    versions,
)
from app.training.standings import learning_curve


@dataclass(frozen=True)
class ModelCard:
    """One model as the workspace shows it, with the rules that decide what it offers
    computed here rather than in the template."""

    model: LearnedModel
    versions: list[ModelVersion]
    latest: ModelVersion | None
    progress: tuple[float, str] | None
    routing: Routing | None
    curve: list[dict[str, Any]]
    wanted_items: int

    @property
    def fitting(self) -> bool:
        """A fit is queued or running: its progress shows, and it can be cancelled."""
        return self.latest is not None and self.latest.status in UNFINISHED

    @property
    def learner(self) -> LearnerKind:
        return kinds.of(self.model.kind)

    @property
    def trainable(self) -> bool:
        """ "Train now" fits it again (a CompRF model follows its build instead)."""
        return not self.learner.from_build

    @property
    def labelling(self) -> str | None:
        """Where a CompRF model's labelling stands: routing (raters answering its
        questions), labelled, nothing to label, ready to label, or waiting for its build."""
        if not self.learner.from_build:
            return None
        if self.routing is not None and self.routing.status is RoutingStatus.routing:
            return "routing"
        if self.routing is not None and self.routing.status is RoutingStatus.complete:
            return "labelled"
        if self.latest is None or self.latest.status is not VersionStatus.ready:
            return "waiting for its build"
        return "ready to label" if self.wanted_items else "nothing to label"

    @property
    def can_label(self) -> bool:
        """The forest is ready, there are test or unlabelled items, and no routing runs."""
        return (
            self.learner.from_build
            and self.latest is not None
            and self.latest.status is VersionStatus.ready
            and self.wanted_items > 0
            and self.labelling != "routing"
        )

    @property
    def has_embedding(self) -> bool:
        return self.learner.serves_embedding

    @property
    def live(self) -> bool:
        """Something moves without the researcher: a fit, or raters answering a routing."""
        return self.fitting or self.labelling == "routing"


def model_cards(*, session: Session, project: Project) -> list[ModelCard]:
    models = list_models(session=session, project=project)
    wanted = (
        routing.wanted_item_count(session, project.id)
        if any(kinds.of(model.kind).from_build for model in models)
        else 0
    )
    cards = []
    for model in models:
        found = versions(session=session, model=model)
        latest = found[0] if found else None
        routed = None
        if kinds.of(model.kind).from_build and model.build_id is not None:
            routed = routing.newest_routing(session, model.build_id)
        cards.append(
            ModelCard(
                model=model,
                versions=found,
                latest=latest,
                progress=None if latest is None else version_progress(session, latest),
                routing=routed,
                curve=learning_curve(session=session, model=model),
                wanted_items=wanted,
            )
        )
    return cards
