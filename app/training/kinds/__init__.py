"""Learner kinds: each one object (app/training/kinds/<name>.py) implementing the
protocol of app/training/kinds/base.py. Training, serving, the model cards, the archive
and the workspace ask them here."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.models import ModelKind
from app.training.kinds.base import LearnerKind, ReadyFit
from app.training.kinds.choice import CHOICE_KIND
from app.training.kinds.comprf import COMPRF_KIND
from app.training.kinds.disdf import DISDF_KIND
from app.training.kinds.smerf import SMERF_KIND, pack_matrix, unpack_matrix
from app.training.kinds.tete import TETE_KIND
from app.training.kinds.tripletboost import TRIPLETBOOST, boost_predictions
from app.training.schemas import InvalidParams

# In the order the workspace offers them.
LEARNERS: dict[ModelKind, LearnerKind] = {
    learner.kind: learner
    for learner in (TETE_KIND, CHOICE_KIND, TRIPLETBOOST, COMPRF_KIND, SMERF_KIND, DISDF_KIND)
}


def of(kind: ModelKind | str) -> LearnerKind:
    return LEARNERS[ModelKind(kind)]


def checked_params(kind: ModelKind, params: dict[str, Any]) -> dict[str, Any]:
    """The kind's parameters with defaults filled in, or a 422 naming each bad field."""
    try:
        return of(kind).params.model_validate(params).model_dump()
    except ValidationError as exc:
        raise InvalidParams(
            [
                {
                    "loc": ["body", "params", *exc_error["loc"]],
                    # pydantic prefixes a validator's own words with its error type
                    "msg": exc_error["msg"].removeprefix("Value error, "),
                    "type": exc_error["type"],
                }
                for exc_error in exc.errors()
            ]
        ) from None


def every() -> list[LearnerKind]:
    return list(LEARNERS.values())


def passive() -> list[ModelKind]:
    """The kinds that refit by themselves as answers grow."""
    return [learner.kind for learner in LEARNERS.values() if learner.passive]


def from_builds() -> list[ModelKind]:
    """The kinds whose models follow a build."""
    return [learner.kind for learner in LEARNERS.values() if learner.from_build]


def informing(what: str | None = None) -> list[ModelKind]:
    """The kinds whose fits the samplers read (`what`: that part only)."""
    return [
        learner.kind
        for learner in LEARNERS.values()
        if learner.informs_samplers is not None and what in (None, learner.informs_samplers)
    ]


def serving_distances() -> str:
    """The kinds that serve distances, in words: "t-ETE, SMERF and DisDF"."""
    return in_words([learner for learner in LEARNERS.values() if learner.serves_distances])


def in_words(learners: list[LearnerKind]) -> str:
    """Kinds named in a sentence: "t-ETE, the choice model and TripletBoost"."""
    labels = [learner.label for learner in learners]
    if not labels:
        return ""
    return ", ".join(labels[:-1]) + f" and {labels[-1]}" if len(labels) > 1 else labels[0]


__all__ = [
    "LEARNERS",
    "LearnerKind",
    "ReadyFit",
    "boost_predictions",
    "checked_params",
    "every",
    "from_builds",
    "in_words",
    "informing",
    "of",
    "pack_matrix",
    "passive",
    "serving_distances",
    "unpack_matrix",
]
