"""A study's arms (conditions): each participant is allocated one on joining, and sees
the study as that arm sets it (its judgement format and screen shape, its question and
instructions, its items); every answer records the arm.

Allocation balances the arms as psiTurk and lab.js users ask ("least filled"): each
newcomer goes to the open arm with the fewest places taken for its target, counting
completed sessions and live ones (a session quiet for longer than a lease stops
counting: app/raters/places.py). An arm whose target is reached, or that the researcher
stopped (`open`: false), takes nobody new; once every arm does, the study is full.
Joins of one study wait for each other while they count, so the last place of an arm
is never given twice."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core import caches
from app.core.errors import Conflict
from app.designs.arms import OVERRIDES, own_or_study
from app.formats import study_format
from app.models import Project, Rater
from app.models._types import utcnow
from app.raters import places


@dataclass(frozen=True)
class ArmPlaces:
    """An arm's places now: taken (completed and live sessions) of its target."""

    name: str
    target: int | None
    taken: int
    completed: int
    live: int
    open: bool

    @property
    def takes_newcomers(self) -> bool:
        return self.open and (self.target is None or self.taken < self.target)


def arms_of(project: Project) -> list[dict[str, Any]]:
    return list(project.arms or [])


def names(project: Project) -> list[str]:
    return [arm["name"] for arm in arms_of(project)]


def arm_places(*, session: Session, project: Project) -> list[ArmPlaces]:
    """Each arm's places, in the study's order (one count of its raters)."""
    arms = arms_of(project)
    if not arms:
        return []
    now = utcnow()
    rows = session.execute(
        select(
            Rater.arm,
            func.count(),
            func.count(Rater.completed_at),
        )
        .where(places.holds_a_place(project, now))
        .group_by(Rater.arm)
    ).all()
    counted = {arm: (taken, completed) for arm, taken, completed in rows}
    # An erased participant's paid place stays taken, as a completion of their arm.
    erased = places.erased_places(session=session, project=project)
    for name, (erased_taken, erased_completed) in erased.items():
        taken, completed = counted.get(name, (0, 0))
        counted[name] = (taken + erased_taken, completed + erased_completed)
    shown = []
    for arm in arms:
        taken, completed = counted.get(arm["name"], (0, 0))
        shown.append(
            ArmPlaces(
                name=arm["name"],
                target=arm.get("target"),
                taken=taken,
                completed=completed,
                live=taken - completed,
                open=arm.get("open", True),
            )
        )
    return shown


def allocate(*, session: Session, project: Project) -> str | None:
    """The arm a newcomer joins (None: a study without arms), or a 409 saying the study
    is full. The caller holds the study's lock (places.hold_one)."""
    if not project.arms:
        return None
    open_arms = [arm for arm in arm_places(session=session, project=project) if arm.takes_newcomers]
    if not open_arms:
        raise Conflict(places.FULL_NOTICE)
    # The fewest taken for its share of the targets; ties go to the first arm.
    return min(open_arms, key=lambda arm: arm.taken / (arm.target or 1)).name


def full_notice(*, session: Session, project: Project) -> str | None:
    """What a newcomer to a study whose every arm is full reads; None while one is open."""
    if not project.arms:
        return None
    if any(arm.takes_newcomers for arm in arm_places(session=session, project=project)):
        return None
    return places.FULL_NOTICE


def notice_for_newcomers(*, session: Session, project: Project) -> str | None:
    """What a newcomer reads where the study's places, or every arm's, are taken."""
    return places.notice_for_newcomers(session=session, project=project) or full_notice(
        session=session, project=project
    )


def arm_named(project: Project, name: str | None) -> dict[str, Any] | None:
    for arm in arms_of(project):
        if arm["name"] == name:
            return arm
    return None


def answered_in_python(project: Project) -> bool:
    """Whether an arm asks about items of its own, or at a random share of its own: its
    raters' answers then take the full Python path (closer_answer() draws from all the
    study's items, at the study's share)."""
    return any(arm.get("items") or arm.get("random_share") is not None for arm in arms_of(project))


class _Views:
    """Each arm's copy of the study's settings, kept per process while their version
    stands (like raters.service's copies, which they are made from)."""

    def __init__(self) -> None:
        self._views: dict[tuple[str, str], Project] = {}
        self._lock = threading.Lock()

    def get(self, project: Project, name: str) -> Project:
        key = (project.public_slug, name)
        with self._lock:
            hit = self._views.get(key)
        if hit is not None and hit.settings_version == project.settings_version:
            return hit
        view = _view(project, arm_named(project, name))
        with self._lock:
            self._views[key] = view
        return view


def _view(project: Project, arm: dict[str, Any] | None) -> Project:
    names_ = [column.key for column in Project.__mapper__.column_attrs]
    copy = Project(**{name: getattr(project, name) for name in names_})
    if arm is None:  # an arm removed since the rater joined: the study as it is
        return copy
    for name in OVERRIDES:
        value = own_or_study(project, arm, name)
        setattr(copy, name, study_format(value) if name == "judgement" else value)
    if arm.get("judgement") is not None and arm.get("question") is None:
        # A format of its own asks its own question, unless the study's was reworded.
        if project.question == project.judgement.default_question:
            copy.question = copy.judgement.default_question
    if copy.judgement is not project.judgement and arm.get("practice") is None:
        copy.practice = None  # the study's practice asks another format than the arm's
    copy.arm_shown = arm["name"]
    copy.arm_items = tuple(arm["items"]) if arm.get("items") else None
    return copy


def briefs_otherwise(project: Project, arm: str | None) -> bool:
    """Whether a rater of `arm` reads other instructions than the study's own (the
    arm's words, or those of another format), which a newcomer was shown."""
    seen = seen_by(project, arm)
    return seen.instructions != project.instructions or seen.judgement is not project.judgement


def seen_by(project: Project, arm: str | None) -> Project:
    """The study as a rater of `arm` sees it (the study itself without arms)."""
    if arm is None or not project.arms:
        return project
    return caches.current().get("rating.arm_views", _Views).get(project, arm)
