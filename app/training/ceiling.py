"""A study's noise ceiling (issue 57): how well the raters' own majority predicts one
rater's choice on the screens several of them answered (app/learn/ceiling.py), the most
any model of the choices can expect. Read from the judgements that share a screen
(`judgements.screen`): those the study repeated on purpose (`repeat_share`), and any an
upload holds; and from the plain triplet answers that share a question (anchor and pair):
those a CompRF build asks of several raters for its majority (on a triplet screen, or as
an item of a sorting screen), and any an upload holds.
Excluded raters are left out, as from every fit; the first pick of a rank screen is its
choice (the one a choice model's first choice predicts), the closer item a triplet's.

Computed again only when the study's judgements or exclusions changed since, or answers
came (a large study's, whose reading takes long, at most once in a hundred times that
time): the Models page asks on every refresh.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

import numpy as np
from sqlalchemy import and_, case, exists, func, or_, select
from sqlalchemy.orm import Session

from app.core import caches
from app.formats import SORT
from app.formats import every as every_format
from app.learn.ceiling import noise_ceiling
from app.models import Judgement, Project, Triplet
from app.scheduling.thresholds import excluded_rater_ids
from app.triplets.judged import published_judgements
from app.triplets.log import published

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
    newest_answer = session.scalar(
        select(func.max(Triplet.id)).where(Triplet.project_id == project.id)
    )
    key = (project.id, newest, count, tuple(sorted(excluded)))
    kept = caches.current().get("ceilings", _Kept)
    found = kept.get(key)
    now = time.monotonic()
    if found is not None and found["answers_read"] != newest_answer:
        # Answers came since: read again, but a large study (whose reading takes long) no
        # more often than once in a hundred times its cost.
        if found["cost"] > 0.05 and now - found["computed_at"] < 100 * found["cost"]:
            return found["ceiling"]
        found = None
    if found is None:
        began = time.monotonic()
        ceiling = _computed(session, project.id, excluded)
        found = {
            "ceiling": ceiling,
            "answers_read": newest_answer,
            "computed_at": now,
            "cost": time.monotonic() - began,
        }
        kept.put(key, found)
    return found["ceiling"]


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
    screens = np.array([row[0] for row in rows], np.int64)
    raters = np.array([row[1] for row in rows], np.int64)
    chosen = np.array([row[2][0] for row in rows], np.int64)
    asked, who, closer = _shared_triplets(session, project_id, excluded)
    # One number a screen across both kinds (a screen's number and a triplet's row of the
    # shared questions could coincide).
    kinds = np.concatenate([np.zeros(len(screens), np.int64), np.ones(len(asked), np.int64)])
    _, screen = np.unique(
        np.column_stack([kinds, np.concatenate([screens, asked])]), axis=0, return_inverse=True
    )
    ceiling = None
    if len(screen):
        ceiling = noise_ceiling(
            screen.ravel(), np.concatenate([raters, who]), np.concatenate([chosen, closer])
        )
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
            "why": "no screen or triplet question has answers of two raters yet: a study of "
            "odd-one-out or rank screens repeats a share of them (repeat_share), a CompRF "
            "build asks each of its questions of several raters",
        }
    return {**asdict(ceiling), "why": None}


def _plain_answers(project_id: int, excluded: list[int]):
    """The raters' published answers to plain triplet questions, excluded raters left out:
    a triplet's own answer, and each item's of a sorting screen (a CompRF query, item and
    pivots, that several raters may answer on screens of their own); an odd-one-out's or
    rank screen's triplets are its judgement's, which counts as a whole."""
    sorted_on_a_screen = exists().where(
        Judgement.id == Triplet.judgement_id, Judgement.format == SORT.name
    )
    return (
        Triplet.project_id == project_id,
        published(project_id),
        Triplet.rater_id.is_not(None),
        Triplet.rater_id.not_in(excluded),
        or_(Triplet.judgement_id.is_(None), sorted_on_a_screen),
    )


def _shared_triplets(
    session: Session, project_id: int, excluded: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The triplet answers to questions (anchor and pair, in either order) that two raters
    or more answered, oldest first: the question's number, the rater, the closer item."""
    answers = _plain_answers(project_id, excluded)
    lo = case((Triplet.closer_id < Triplet.farther_id, Triplet.closer_id), else_=Triplet.farther_id)
    hi = case((Triplet.closer_id < Triplet.farther_id, Triplet.farther_id), else_=Triplet.closer_id)
    shared = (
        select(Triplet.anchor_id.label("anchor"), lo.label("lo"), hi.label("hi"))
        .where(*answers)
        .group_by(Triplet.anchor_id, lo, hi)
        .having(func.count(func.distinct(Triplet.rater_id)) >= 2)
        .subquery()
    )
    rows = session.execute(
        select(Triplet.anchor_id, lo, hi, Triplet.rater_id, Triplet.closer_id)
        .join(
            shared,
            and_(shared.c.anchor == Triplet.anchor_id, shared.c.lo == lo, shared.c.hi == hi),
        )
        .where(*answers)
        .order_by(Triplet.id)
    ).all()
    if not rows:
        empty = np.empty(0, np.int64)
        return empty, empty, empty
    table = np.array(rows, np.int64)
    _, question = np.unique(table[:, :3], axis=0, return_inverse=True)
    return question.ravel(), table[:, 3], table[:, 4]
