"""Screens drawn from a study's items (a `PickedScreen` format: odd-one-out, rank, …):
which screen a rater is served. Each format (app/formats) draws its screens and
checks; here a rater is never served the same screen twice, judged by its key
(`ScreenKey`) stored in an assignment's anchor, lo and hi.

A screen is drawn from the same `Draws` as a triplet, so a seeded run serves the same
screens on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.formats import MOST_REPEATED, REPEAT_RATERS, PickedScreen, Screen, ScreenKey
from app.models import Project
from app.scheduling.draws import RANDOM_DRAWS, Draws

# Studies with at most this many screen keys are searched whole once random draws keep
# hitting screens the rater has seen; larger ones are drawn from again, this often.
MOST_ENUMERATED = 200_000
MORE_DRAWS = 2_000


def screen_format(project: Project) -> PickedScreen | None:
    """The study's format where its questions are screens drawn from its items; None
    where they are triplets."""
    format = project.judgement
    return format if isinstance(format, PickedScreen) else None


def screen_size(project: Project) -> int:
    """Distinct items a screen of the study shows."""
    return project.judgement.items_per_screen(project)


def draw_unseen(
    project: Project,
    ids: np.ndarray,
    check: bool,
    draws: Draws,
    was_served: Callable[[ScreenKey], bool],
    served_keys: Callable[[], set[ScreenKey]],
    answers_to: Callable[[list[int]], dict[int, int]],
) -> Screen | None:
    """A screen (or check) of the study's format the rater was never served: the first
    of a few drawn, else one found against every key they were served (`served_keys`,
    read once); None once the study has none left for them. A `repeat_share` of the
    random ones repeat a screen other raters had (`answers_to`: the answers each screen
    number has)."""
    format = screen_format(project)
    if format is None or len(ids) < screen_size(project):
        return None
    rng = draws.search_rng()
    if not check and project.repeat_share > 0 and rng.random() < project.repeat_share:
        # The answers of several raters to one screen measure the noise ceiling.
        repeat = next_repeat(project, format, ids, served_keys, answers_to)
        if repeat is not None:
            return repeat
    for _ in range(RANDOM_DRAWS):
        screen = format.draw(project, ids, rng, check)
        if not was_served(screen.key):
            return screen
    seen = served_keys()
    if check or format.key_count(project, len(ids)) > MOST_ENUMERATED:
        for _ in range(MORE_DRAWS):
            screen = format.draw(project, ids, rng, check)
            if screen.key not in seen:
                return screen
        return None
    unseen = [
        key
        for key in format.every_key(project, ids)
        if (int(ids[key[0]]), int(ids[key[1]]), int(ids[key[2]])) not in seen
    ]
    return format.from_key(project, ids, rng.choice(unseen), rng) if unseen else None


# Repeated screens looked at a query.
REPEAT_CHUNK = 50


def next_repeat(
    project: Project,
    format: PickedScreen,
    ids: np.ndarray,
    served_keys: Callable[[], set[ScreenKey]],
    answers_to: Callable[[list[int]], dict[int, int]],
) -> Screen | None:
    """The study's first repeated screen that fewer than REPEAT_RATERS raters answered and
    this rater never had: they fill in turn, each to REPEAT_RATERS answers (a few more
    where raters hold it at once). None once MOST_REPEATED are full or had."""
    seen: set[ScreenKey] | None = None
    for start in range(0, MOST_REPEATED, REPEAT_CHUNK):
        pool = [
            format.repeated(project, ids, number, project.id)
            for number in range(start, start + REPEAT_CHUNK)
        ]
        numbers = [
            format.screen_of([] if screen.reference is None else [screen.reference], screen.shown)
            for screen in pool
        ]
        answered = answers_to(numbers)
        for screen, number in zip(pool, numbers, strict=True):
            if answered.get(number, 0) >= REPEAT_RATERS:
                continue
            if seen is None:
                seen = served_keys()
            if screen.key not in seen:
                return screen
    return None
