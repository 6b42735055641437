"""One rater up close: every comparison they answered (attention checks included, with
whether they passed), their response times and how they compare with the others. The
page behind a row of the Raters table and GET /projects/{id}/raters/{rater_id}/answers
both read `answers` and `response_times`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.formats import TRIPLET, JudgementFormat, PickedScreen
from app.models import Assignment, Choice, Item, Purpose, Rater

PURPOSE_WORDS = {
    Purpose.routing: "routing a new item",
    Purpose.build: "a CompRF node",
    Purpose.majority: "a further answer (majority)",
    Purpose.random: "random",
    Purpose.attention: "attention check",
    Purpose.proposal: "a sampler's question",
    Purpose.repeat: "random, repeated to other raters (the noise ceiling)",
}


@dataclass(frozen=True)
class RaterAnswer:
    answered_at: datetime
    purpose: str
    anchor: str
    left: str
    right: str
    choice: str  # left, right, cant_tell; "picked" for a screen's picks
    chosen: str | None  # the key of the candidate chosen; None for "can't tell"
    response_time_ms: int | None
    passed: bool | None  # an attention check's result; None for any other comparison
    format: JudgementFormat = TRIPLET
    shown: list[str] = field(default_factory=list)  # a screen's items, in display order
    picked: list[str] = field(default_factory=list)  # a screen's picks, in order
    # A screen of sounds or videos: how often each item (by key) was played first.
    plays: dict[str, int] | None = None


def answers(*, session: Session, rater: Rater, limit: int) -> list[RaterAnswer]:
    """The rater's answers, newest first (up to `limit`)."""
    rows = (
        session.execute(
            select(Assignment)
            .where(Assignment.rater_id == rater.id, Assignment.answered_at.is_not(None))
            .order_by(Assignment.answered_at.desc(), Assignment.id.desc())
            .limit(limit)
        )
        .scalars()
        .all()
    )
    ids = {i for row in rows for i in (row.anchor_id, row.lo_id, row.hi_id, *(row.shown or ()))}
    keys = dict(session.execute(select(Item.id, Item.key).where(Item.id.in_(ids))).all())
    found = []
    for row in rows:
        # A sorting screen's items are triplet queries (item, pivots) answered by a side.
        if isinstance(row.format, PickedScreen):
            found.append(_screen_answer(row, row.format, keys))
            continue
        left, right = (row.lo_id, row.hi_id) if row.left_is_lo else (row.hi_id, row.lo_id)
        choice = row.choice
        assert row.answered_at is not None and choice is not None  # answered rows only
        chosen = {Choice.left: left, Choice.right: right}.get(choice)
        attention = row.purpose == Purpose.attention
        found.append(
            RaterAnswer(
                answered_at=row.answered_at,
                purpose=PURPOSE_WORDS.get(Purpose(row.purpose), str(row.purpose)),
                anchor=keys.get(row.anchor_id, "?"),
                left=keys.get(left, "?"),
                right=keys.get(right, "?"),
                choice=choice,
                chosen=keys.get(chosen) if chosen is not None else None,
                response_time_ms=row.response_time_ms,
                # A check's anchor is one of the candidates: choosing it is the answer.
                passed=(chosen == row.anchor_id) if attention else None,
                format=row.format,
                plays=row.plays,
            )
        )
    return found


def _screen_answer(row: Assignment, format: PickedScreen, keys: dict[int, str]) -> RaterAnswer:
    reference = row.anchor_id if format.has_reference else None
    picked = row.chosen or []
    shown = row.shown or []
    attention = row.purpose == Purpose.attention
    assert row.answered_at is not None  # answered rows only
    return RaterAnswer(
        answered_at=row.answered_at,
        purpose=PURPOSE_WORDS.get(Purpose(row.purpose), str(row.purpose)),
        anchor="" if reference is None else keys.get(reference, "?"),
        left="",
        right="",
        choice="picked" if picked else Choice.cant_tell.value,
        chosen=keys.get(picked[0], "?") if picked else None,
        response_time_ms=row.response_time_ms,
        passed=(bool(picked) and format.check_passed(reference, shown, picked))
        if attention
        else None,
        format=row.format,
        shown=[keys.get(item, "?") for item in shown],
        picked=[keys.get(item, "?") for item in picked],
        plays=row.plays,
    )


@dataclass(frozen=True)
class ResponseTimes:
    """Seconds to answer: the rater's quartiles beside the project's median."""

    timed: int
    p25: float | None
    median: float | None
    p75: float | None
    project_median: float | None


def response_times(*, session: Session, rater: Rater) -> ResponseTimes:
    mine = np.array(
        session.scalars(
            select(Assignment.response_time_ms).where(
                Assignment.rater_id == rater.id,
                Assignment.response_time_ms.is_not(None),
                Assignment.screen_id.is_(None),  # a sorting screen's time once
            )
        ).all(),
        dtype=float,
    )
    everyone = np.array(
        session.scalars(
            select(Assignment.response_time_ms)
            .where(
                Assignment.project_id == rater.project_id,
                Assignment.response_time_ms.is_not(None),
                Assignment.screen_id.is_(None),
            )
            .order_by(Assignment.id.desc())
            .limit(20_000)
        ).all(),
        dtype=float,
    )
    project = float(np.median(everyone)) / 1000 if len(everyone) else None
    if not len(mine):
        return ResponseTimes(0, None, None, None, project)
    p25, p50, p75 = (float(q) / 1000 for q in np.percentile(mine, [25, 50, 75]))
    return ResponseTimes(len(mine), p25, p50, p75, project)
