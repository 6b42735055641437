"""What is wrong with the arms a researcher sets (app/raters/arms.py allocates and
shows them): checked with the study's other settings before anything is saved."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.formats import JudgementFormat, ScreenShape, study_format
from app.models import Item, Project


def problems(
    *,
    session: Session,
    project: Project,
    arms: Sequence[dict[str, Any]],
    judgement: JudgementFormat,
    shape: ScreenShape,
) -> list[str]:
    """What is wrong with arms a researcher sets (beside the study's own `judgement` and
    screen `shape`), each naming the arm and field: a shape a format cannot ask, items
    the study lacks or too few of them for a screen."""
    found: list[str] = []
    keys: set[str] | None = None
    for arm in arms:
        name = arm["name"]
        format = study_format(arm.get("judgement") or judgement)
        shown = arm.get("shown") or shape.shown
        picks = arm.get("picks") or shape.picks
        if picks >= shown:
            found.append(
                f"arms[{name}]: picks must be fewer than shown; got picks {picks} of shown {shown}"
            )
            continue
        if not arm.get("items"):
            continue
        if keys is None:
            keys = set(session.scalars(select(Item.key).where(Item.project_id == project.id)))
        missing = [key for key in arm["items"] if key not in keys]
        if missing:
            listed = ", ".join(repr(key) for key in missing[:5])
            more = f" and {len(missing) - 5:,} more" if len(missing) > 5 else ""
            found.append(f"arms[{name}].items: the study has no item {listed}{more}")
            continue
        needed = format.items_per_screen(ScreenShape(shown, picks))
        if len(set(arm["items"])) < needed:
            found.append(
                f"arms[{name}].items: a {format.name} screen shows {needed} items; "
                f"the arm has {len(set(arm['items']))}"
            )
    return found
