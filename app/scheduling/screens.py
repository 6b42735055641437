"""Screens drawn from a study's items (a `PickedScreen` format: odd-one-out, rank, …):
which screen a rater is served. Each format (app/formats) draws its screens and
checks; here a rater is never served the same screen twice, judged by its key
(`ScreenKey`) stored in an assignment's anchor, lo and hi.

A screen is drawn from the same `Draws` as a triplet, so a seeded run serves the same
screens on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np

from app.formats import MOST_REPEATED, REPEAT_RATERS, PickedScreen, Screen, ScreenKey
from app.models import Project
from app.scheduling.draws import RANDOM_DRAWS, Draws

# Studies with at most this many screen keys are searched whole once random draws keep
# hitting screens the rater has seen; larger ones are drawn from again, this often.
MOST_ENUMERATED = 200_000
MORE_DRAWS = 2_000

T = TypeVar("T")


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
    whole: bool = True,
) -> Screen | None:
    """A screen (or check) of the study's format the rater was never served: the first
    of a few drawn, else (where `whole`) one found against every key they were served
    (`served_keys`, read once); None once the study has none left for them. A
    `repeat_share` of the random ones repeat a screen other raters had (`answers_to`:
    the answers each screen number has)."""
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
    if not whole:
        return None
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


# Repeated screens (or questions) looked at a query.
REPEAT_CHUNK = 50


def first_unfilled(
    pool: Callable[[range], list[tuple[T, Hashable, ScreenKey]]],
    answers_to: Callable[[list], dict],
    served_keys: Callable[[], set[ScreenKey]],
) -> T | None:
    """The study's first repeated screen or question that fewer than REPEAT_RATERS raters
    answered and this rater never had: they fill in turn, each to REPEAT_RATERS answers (a
    few more where raters hold it at once). `pool(numbers)` gives each numbered one with
    what its answers are counted by (`answers_to`) and its key. None once MOST_REPEATED
    are full or had."""
    seen: set[ScreenKey] | None = None
    for start in range(0, MOST_REPEATED, REPEAT_CHUNK):
        chunk = pool(range(start, start + REPEAT_CHUNK))
        answered = answers_to([counted for _, counted, _ in chunk])
        for found, counted, key in chunk:
            if answered.get(counted, 0) >= REPEAT_RATERS:
                continue
            if seen is None:
                seen = served_keys()
            if key not in seen:
                return found
    return None


def next_repeat(
    project: Project,
    format: PickedScreen,
    ids: np.ndarray,
    served_keys: Callable[[], set[ScreenKey]],
    answers_to: Callable[[list[int]], dict[int, int]],
) -> Screen | None:
    """The study's first repeated screen (`first_unfilled`), counted by its number."""

    def pool(numbers: range) -> list[tuple[Screen, Hashable, ScreenKey]]:
        screens = [format.repeated(project, ids, number, project.id) for number in numbers]
        return [
            (
                screen,
                format.screen_of(
                    [] if screen.reference is None else [screen.reference], screen.shown
                ),
                screen.key,
            )
            for screen in screens
        ]

    return first_unfilled(pool, answers_to, served_keys)
