"""A study's noise ceiling (issue 57): how well the raters' own majority predicts one
rater's choice on the screens several of them answered (app/learn/ceiling.py), the most
any model of the choices can expect. Read from the judgements that share a screen
(`judgements.screen`): those the study repeated on purpose (`repeat_share`), and any an
upload holds. Excluded raters are left out, as from every fit; the first pick of a rank
screen is its choice (the one a choice model's first choice predicts).

Computed again only when the study's judgements or exclusions changed since: the Models
page asks on every refresh.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core import caches
from app.formats import every as every_format
from app.learn.ceiling import noise_ceiling
from app.models import Judgement, Project
from app.scheduling.thresholds import excluded_rater_ids
from app.triplets.judged import published_judgements

# Ceilings kept per process (one per study and state of its judgements).
KEPT = 64


class _Kept:
    def __init__(self) -> None:
        self.found: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple) -> dict[str, Any] | None:
        with self.lock:
            if key in self.found:
                self.found.move_to_end(key)
                return self.found[key]
        return None

    def put(self, key: tuple, value: dict[str, Any]) -> None:
        with self.lock:
            self.found[key] = value
            while len(self.found) > KEPT:
                self.found.popitem(last=False)


def _choice_formats() -> list[str]:
    """The formats whose screens are a choice among their items (odd-one-out, rank)."""
    return [each.name for each in every_format() if each.learned_whole]


def study_ceiling(session: Session, project: Project) -> dict[str, Any]:
    """The ceiling as GET …/ceiling gives it: accuracy, its interval (low, high, level),
    the screens and raters and answers it rests on, the within-rater agreement; nulls
    and a sentence where no screen was answered by two raters yet."""
    excluded = excluded_rater_ids(session, project.id)
    newest, count = session.execute(
        select(func.max(Judgement.id), func.count()).where(Judgement.project_id == project.id)
    ).one()
    key = (project.id, newest, count, tuple(sorted(excluded)))
    kept = caches.current().get("ceilings", _Kept)
    found = kept.get(key)
    if found is None:
        found = _computed(session, project.id, excluded)
        kept.put(key, found)
    return found


def _computed(session: Session, project_id: int, excluded: list[int]) -> dict[str, Any]:
    answered = (
        *published_judgements(project_id),
        Judgement.screen.is_not(None),
        Judgement.rater_id.is_not(None),
        Judgement.rater_id.not_in(excluded),
        Judgement.format.in_(_choice_formats()),
    )
    shared = (
        select(Judgement.screen)
        .where(*answered)
        .group_by(Judgement.screen)
        .having(func.count(func.distinct(Judgement.rater_id)) >= 2)
    )
    rows = session.execute(
        select(Judgement.screen, Judgement.rater_id, Judgement.chosen)
        .where(*answered, Judgement.screen.in_(shared))
        .order_by(Judgement.id)
    ).all()
    ceiling = None
    if rows:
        screens, raters, chosen = zip(*rows, strict=True)
        ceiling = noise_ceiling(screens, raters, [picks[0] for picks in chosen])
    if ceiling is None:
        return {
            "accuracy": None,
            "majority_share": None,
            "low": None,
            "high": None,
            "level": 0.95,
            "screens": 0,
            "raters": 0,
            "answers": 0,
            "within_rater": None,
            "within_rater_pairs": 0,
            "why": "no odd-one-out or rank screen has answers of two raters yet: a study "
            "repeats a share of its screens (repeat_share) to measure it",
        }
    return {**asdict(ceiling), "why": None}
