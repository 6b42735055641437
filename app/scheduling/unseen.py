"""Queries a rater was never served: a random triplet (or check) drawn from the
scheduler's `Draws`, or a screen of the study's format, with a full search where random
draws keep finding what the rater has seen."""

from __future__ import annotations

from datetime import datetime

import numpy as np
from sqlalchemy import func, literal_column, or_, select, tuple_
from sqlalchemy.orm import Session

from app.formats import Screen, ScreenKey, repeat_source
from app.models import Assignment, Judgement, Project, Purpose
from app.scheduling import screens
from app.scheduling.draws import RANDOM_DRAWS, Draws
from app.scheduling.statements import SEEN


def triplet(session: Session, rater_id: int, ids: np.ndarray, attention: bool, draws: Draws):
    """A random query (or attention check) the rater has not been served: the first of
    the drawn candidates, as closer_answer() takes it, else one found by a full search;
    None once the rater has seen every one the study has."""
    if len(ids) < 3:
        return None
    drawn = drawn_triplet(session, rater_id, ids, attention, draws)
    if drawn is not None:
        return drawn
    return _any_triplet(session, rater_id, ids, attention, draws.search_rng())


def drawn_triplet(
    session: Session,
    rater_id: int,
    ids: np.ndarray,
    attention: bool,
    draws: Draws,
    taken: tuple[int, int, int] | None = None,
) -> tuple[int, int, int] | None:
    """The first of the drawn candidates the rater has not been served (nor `taken`,
    served with it), as closer_answer() takes it; None where each was."""
    for anchor, p, q in draws.candidates(ids):
        first = anchor if attention else p
        lo, hi = min(first, q), max(first, q)
        if (anchor, lo, hi) != taken and not was_served(session, rater_id, (anchor, lo, hi)):
            return anchor, lo, hi
    return None


def repeats_now(project: Project, draws: Draws) -> bool:
    """Whether the draws ask this triplet study for a random question (its random share:
    not one that fills a queue with none free) that repeats one other raters had, by the
    draws' own coin: the answer function's caller hands exactly these to this path."""
    drawn = project.attention_rate <= draws.kind < project.attention_rate + project.random_share
    return drawn and project.repeat_share > 0 and draws.search_rng().random() < project.repeat_share


def repeated_question(ids: np.ndarray, number: int, salt: int) -> tuple[int, int, int]:
    """The study's repeated question `number`, (anchor, lo, hi): the same for every rater
    while the study's items stay the same."""
    anchor, p, q = repeat_source(salt, number).sample(range(len(ids)), 3)
    lo, hi = sorted((int(ids[p]), int(ids[q])))
    return int(ids[anchor]), lo, hi


def repeated_triplet(
    session: Session,
    project: Project,
    rater_id: int,
    ids: np.ndarray,
    now: datetime,
    taken: tuple[int, int, int] | None = None,
) -> tuple[int, int, int] | None:
    """The study's first repeated question to fill (screens.first_unfilled, as a screen
    study's repeated screens fill), other than `taken` (the query being served as this
    one is looked for ahead); None below three items."""
    if len(ids) < 3:
        return None

    def pool(numbers: range) -> list:
        return [(q, q, q) for q in (repeated_question(ids, n, project.id) for n in numbers)]

    return screens.first_unfilled(
        pool,
        lambda questions: _asked_again(session, project.id, questions, now),
        lambda: _served_keys(session, rater_id) | ({taken} if taken is not None else set()),
    )


def _asked_again(
    session: Session, project_id: int, questions: list[tuple[int, int, int]], now: datetime
) -> dict[tuple[int, int, int], int]:
    """How many raters answered each of these repeated questions, or hold it now (so that
    the last places are not given twice), through ix_assignments_repeated (its predicate
    stated literally: PostgreSQL matches no bound parameter to it)."""
    key = tuple_(Assignment.anchor_id, Assignment.lo_id, Assignment.hi_id)
    found = session.execute(
        select(Assignment.anchor_id, Assignment.lo_id, Assignment.hi_id, func.count())
        .where(
            Assignment.project_id == project_id,
            Assignment.purpose == literal_column(str(int(Purpose.repeat))),
            key.in_(questions),
            or_(Assignment.answered_at.is_not(None), Assignment.expires_at > now),
        )
        .group_by(Assignment.anchor_id, Assignment.lo_id, Assignment.hi_id)
    ).all()
    return {(int(a), int(lo), int(hi)): int(count) for a, lo, hi, count in found}


# Studies with at most this many distinct queries (about 75 items) are searched whole once
# random draws keep hitting queries the rater has seen; larger ones are drawn from again.
MOST_ENUMERATED = 200_000
MORE_DRAWS = 2_000


def _any_triplet(session: Session, rater_id: int, ids: np.ndarray, attention: bool, rng):
    """A query (or check) the rater was never served, found against everything they were
    served; None only once they have seen every one the study has."""
    seen = _served_keys(session, rater_id)
    n = len(ids)
    total = n * (n - 1) if attention else n * (n - 1) * (n - 2) // 2
    if total > MOST_ENUMERATED:
        for _ in range(MORE_DRAWS):
            anchor, p, q = rng.sample(range(n), 3)
            first = ids[anchor] if attention else ids[p]
            lo, hi = sorted((int(first), int(ids[q])))
            if (int(ids[anchor]), lo, hi) not in seen:
                return int(ids[anchor]), lo, hi
        return None
    unseen = [query for query in _every_triplet(ids, attention) if query not in seen]
    return rng.choice(unseen) if unseen else None


def _every_triplet(ids: np.ndarray, attention: bool):
    ordered = sorted(int(i) for i in ids)
    for anchor in ordered:
        others = [i for i in ordered if i != anchor]
        if attention:
            yield from ((anchor, min(anchor, o), max(anchor, o)) for o in others)
        else:
            yield from ((anchor, lo, hi) for at, lo in enumerate(others) for hi in others[at + 1 :])


def was_served(session: Session, rater_id: int, key: tuple[int, int, int]) -> bool:
    """Whether the rater was served this query (or screen) before, by its key."""
    anchor, lo, hi = key
    return SEEN.run(session, {"rater": rater_id, "anchor": anchor, "lo": lo, "hi": hi}) is not None


def _served_keys(session: Session, rater_id: int) -> set[tuple[int, int, int]]:
    """The key of every query (and screen) the rater was served."""
    return {
        (row[0], row[1], row[2])
        for row in session.execute(
            select(Assignment.anchor_id, Assignment.lo_id, Assignment.hi_id).where(
                Assignment.rater_id == rater_id
            )
        )
    }


def _answers_to(session: Session, project_id: int, numbers: list[int]) -> dict[int, int]:
    """How many judgements each of these screen numbers has (judgements.screen)."""
    found = session.execute(
        select(Judgement.screen, func.count())
        .where(Judgement.project_id == project_id, Judgement.screen.in_(numbers))
        .group_by(Judgement.screen)
    ).all()
    return {int(screen): int(count) for screen, count in found if screen is not None}


def screen_around(
    session: Session,
    project: Project,
    rater_id: int,
    ids: np.ndarray,
    triplet: tuple[int, int, int],
    draws: Draws,
) -> Screen | None:
    """A proposed triplet asked on a screen of the study's format the rater was never
    served (a few draws of the other items); None: ask it as a triplet."""
    format = screens.screen_format(project)
    if format is None:
        return None
    rng = draws.search_rng()
    for _ in range(RANDOM_DRAWS):
        found = format.around(project, ids, triplet, rng)
        if found is None or not was_served(session, rater_id, found.key):
            return found
    return None


def screen(
    session: Session,
    project: Project,
    rater_id: int,
    ids: np.ndarray,
    check: bool,
    draws: Draws,
    taken: ScreenKey | None = None,
    whole: bool = True,
) -> Screen | None:
    """A screen (or check) the rater was never served, nor `taken` (served with it);
    without `whole`, of the drawn screens only (no search of every screen)."""
    return screens.draw_unseen(
        project,
        ids,
        check,
        draws,
        lambda key: key == taken or was_served(session, rater_id, key),
        lambda: _served_keys(session, rater_id) | ({taken} if taken is not None else set()),
        lambda numbers: _answers_to(session, project.id, numbers),
        whole,
    )
