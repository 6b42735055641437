"""What an arm (a condition) may set of its own, and the one rule for it: the arm's own
setting where it sets one, else the study's. The rating pages (app/raters/arms.py) and
the active-gain measure (app/training/gain.py) both read arms through it."""

from __future__ import annotations

from typing import Any

from app.models import Project

# The settings an arm may set of its own (beside its name, target, items and `open`).
OVERRIDES = (
    "judgement",
    "shown",
    "picks",
    "question",
    "instructions",
    "practice",
    "random_share",
)


def own_or_study(project: Project, arm: dict[str, Any], name: str) -> Any:
    """A setting as the arm's raters get it (one of OVERRIDES): the arm's own where it
    sets one, else the study's."""
    return arm[name] if arm.get(name) is not None else getattr(project, name)
