"""CompRF: a comparison-based random forest grown by its build (app/builds), whose
queries raters answer node by node. A model of it follows its build and is never fitted;
it labels items by routing them down its trees, raters answering the routing's questions
first (app/builds/routing.py)."""

from __future__ import annotations

from app.models import ModelKind
from app.training.kinds.base import LearnerKind
from app.training.schemas import CompRFParams


class CompRFKind(LearnerKind):
    kind = ModelKind.comprf
    label = "CompRF"
    title = "CompRF forest (from a build)"
    params = CompRFParams
    from_build = True


COMPRF_KIND = CompRFKind()
