"""What is wrong with the practice screens a researcher sets (app/rating/practice.py asks
them): each screen must show the study's items in the shape its format asks, with an
answer among them; checked with the study's other settings before anything is saved."""

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
    practice: dict[str, Any] | None,
    judgement: JudgementFormat,
    shape: ScreenShape,
    arms: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """What is wrong with the study's practice (`practice`, as it would be saved) and
    each arm's, for the format and shape each asks; each problem names its field and
    screen (`practice.trials[2]`, `arms[B].practice.trials[0].items`)."""
    keys: set[str] | None = None

    def known() -> set[str]:
        nonlocal keys
        if keys is None:
            keys = set(session.scalars(select(Item.key).where(Item.project_id == project.id)))
        return keys

    found = _trials_problems("practice", practice, judgement, shape, known)
    for arm in arms:
        if arm.get("practice") is None:
            continue  # the study's (or, asking another format, none)
        format = study_format(arm.get("judgement") or judgement)
        own = ScreenShape(arm.get("shown") or shape.shown, arm.get("picks") or shape.picks)
        field = f"arms[{arm['name']}].practice"
        found += _trials_problems(field, arm["practice"], format, own, known)
    return found


def _trials_problems(
    field: str,
    practice: dict[str, Any] | None,
    format: JudgementFormat,
    shape: ScreenShape,
    known,
) -> list[str]:
    if practice is None:
        return []
    found = []
    for at, trial in enumerate(practice["trials"]):
        missing = [key for key in trial["items"] if key not in known()]
        if missing:
            found.append(f"{field}.trials[{at}].items: the study has no item {missing[0]!r}")
            continue
        problem = format.practice_problem(shape, trial["items"], trial["answer"])
        if problem is not None:
            found.append(f"{field}.trials[{at}]: {problem}")
    return found
