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

from app.formats import REPEAT_POOL, PickedScreen, Screen, ScreenKey
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
) -> Screen | None:
    """A screen (or check) of the study's format the rater was never served: the first
    of a few drawn, else one found against every key they were served (`served_keys`,
    read once); None once the study has none left for them."""
    format = screen_format(project)
    if format is None or len(ids) < screen_size(project):
        return None
    rng = draws.search_rng()
    if not check and project.repeat_share > 0 and rng.random() < project.repeat_share:
        # One of the study's pool of repeated screens, if the rater has not had it: the
        # answers of several raters to one screen measure the noise ceiling.
        repeat = format.repeated(project, ids, rng.randrange(REPEAT_POOL), project.id)
        if not was_served(repeat.key):
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
