"""How a project's models compare: each model's learning curve over its versions, and
which model labels items best now (on the test split, else by cross-validation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.builds import routing
from app.models import LearnedModel, ModelVersion, Project, VersionStatus
from app.training import kinds
from app.training.service import build_of, list_models, newest_ready

# What a learning curve plots, in the order a researcher reads them: (metric path, name).
CURVE_METRICS = (
    (("heldout_choice_accuracy",), "held-out choice accuracy"),
    (("heldout_triplet_error",), "held-out triplet error"),
    (("test", "accuracy"), "test accuracy"),
    (("cv", "accuracy"), "cross-validated accuracy"),
    (("leave_one_out", "accuracy"), "leave-one-out accuracy"),
)


def learning_curve(*, session: Session, model: LearnedModel) -> list[dict[str, Any]]:
    """One series per metric the model's ready versions report: (answers used, value),
    one point per version, oldest first."""
    ready = session.scalars(
        select(ModelVersion)
        .where(ModelVersion.model_id == model.id, ModelVersion.status == VersionStatus.ready)
        .order_by(ModelVersion.number)
    )
    series: dict[str, list[list[float]]] = {}
    for version in ready:
        for path, name in CURVE_METRICS:
            value: Any = version.metrics or {}
            for step in path:
                value = value.get(step) if isinstance(value, dict) else None
            if isinstance(value, int | float):
                series.setdefault(name, []).append([version.answers_count, float(value)])
    return [{"name": name, "points": points} for name, points in series.items()]


@dataclass(frozen=True)
class LabellingStanding:
    """How well one model labels items now (its newest ready version), on the
    researcher's test split and by cross-validation over the labelled items: accuracy
    among the items it labels, and the share it labels."""

    model: LearnedModel
    answers: int
    test: tuple[float, float] | None
    cv: tuple[float, float] | None

    def right(self, measure: str) -> float | None:
        """The share of all measured items labelled right (accuracy x coverage): a model
        that labels few items well does not beat one that labels all of them."""
        found = getattr(self, measure)
        return None if found is None else found[0] * found[1]


def _forest_on_test_split(session: Session, model: LearnedModel) -> LabellingStanding | None:
    """A CompRF forest labels an item by routing it, with questions to raters: it is
    measured by its newest complete routing of the test split, never cross-validated
    (its training items hold no answers to route them down trees that left them out)."""
    build = build_of(session, model)
    routed = routing.routing_of_test_split(session=session, build=build) if build else None
    if routed is None:
        return None
    return LabellingStanding(model, routed.answers, (routed.accuracy, routed.coverage), None)


def labelling_standings(
    *, session: Session, project: Project
) -> tuple[list[LabellingStanding], LabellingStanding | None, str | None]:
    """Every model whose newest ready version labels items, and the one that labels
    best now: on the test split where every such model was measured on it, else by
    cross-validation (None where fewer than two models can be compared)."""
    standings = []
    for model in list_models(session=session, project=project):
        version = newest_ready(session, model.id)
        if version is None:
            continue
        if kinds.of(model.kind).from_build:
            routed = _forest_on_test_split(session, model)
            if routed is not None:
                standings.append(routed)
            continue
        metrics = version.metrics or {}
        found = {}
        for measure in ("test", "cv", "leave_one_out"):
            entry = metrics.get(measure)
            if isinstance(entry, dict) and entry.get("accuracy") is not None:
                found[measure] = (float(entry["accuracy"]), float(entry.get("coverage") or 1.0))
        if found:
            standings.append(
                LabellingStanding(
                    model,
                    version.answers_count,
                    found.get("test"),
                    found.get("cv") or found.get("leave_one_out"),
                )
            )
    for measure in ("test", "cv"):
        if len(standings) >= 2 and all(s.right(measure) is not None for s in standings):
            return standings, max(standings, key=lambda s: s.right(measure) or 0.0), measure
    return standings, None, None
