"""Screens of more than one triplet: an odd-one-out of three, or "pick the k most like the
reference among n" (rank). Which screen a rater is served, and what their picks imply.

A screen is drawn from the same `Draws` as a triplet, so a seeded run serves the same
screens on SQLite and PostgreSQL. A rater is never served the same screen twice, judged
by its key (`ScreenKey`): the reference (for an odd-one-out, its smallest item) and the
smallest and largest of the other items, stored in an assignment's anchor, lo and hi.
Two rank screens that differ only in their middle items share a key; a rater is then
served one of them, which costs a study nothing but screens it would rarely draw.

Attention checks show a known answer: a rank check shows the reference itself among the
items (it is the first pick), an odd-one-out check shows one item twice beside another
(the other is the odd one).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from app.learn.judgements import odd_one_out_triplets, rank_triplets
from app.models import JudgementFormat, Project, RatingFormat
from app.scheduling import sorting
from app.scheduling.draws import RANDOM_DRAWS, Draws

ScreenKey = tuple[int, int, int]  # (anchor_id, lo_id, hi_id) of the assignment

# Studies with at most this many screen keys are searched whole once random draws keep
# hitting screens the rater has seen; larger ones are drawn from again, this often.
MOST_ENUMERATED = 200_000
MORE_DRAWS = 2_000


@dataclass(frozen=True)
class Screen:
    """A screen as served: its format, the reference (rank), the items in display order,
    how many the rater picks, and a sorting screen's pivots (left, right as shown)."""

    format: JudgementFormat
    reference: int | None
    shown: tuple[int, ...]
    picks: int
    pivots: tuple[int, int] | None = None

    @property
    def key(self) -> ScreenKey:
        if self.pivots is not None:  # its first item's query
            return self.shown[0], min(self.pivots), max(self.pivots)
        if self.reference is None:
            low, middle, high = sorted(self.shown)
            return low, middle, high
        return self.reference, min(self.shown), max(self.shown)


def is_screen_study(project: Project) -> bool:
    return project.judgement is not RatingFormat.triplet


def items_per_screen(judgement: RatingFormat, shown: int) -> int:
    """Distinct items one screen of the format shows, a rank screen's reference included
    (a triplet shows three)."""
    return shown + 1 if judgement is RatingFormat.rank else 3


def screen_size(project: Project) -> int:
    """Distinct items a screen of the study shows."""
    return items_per_screen(project.judgement, project.shown)


def _drawn(project: Project, ids: np.ndarray, rng: random.Random, check: bool) -> Screen:
    if project.judgement is RatingFormat.odd_one_out:
        if check:
            twice, once = (int(ids[at]) for at in rng.sample(range(len(ids)), 2))
            shown = [twice, twice, once]
            rng.shuffle(shown)
            return Screen(JudgementFormat.odd_one_out, None, tuple(shown), 1)
        picked = rng.sample(range(len(ids)), 3)
        return Screen(JudgementFormat.odd_one_out, None, tuple(int(ids[at]) for at in picked), 1)
    size = project.shown + (0 if check else 1)
    picked = [int(ids[at]) for at in rng.sample(range(len(ids)), size)]
    reference, shown = picked[0], picked[1:]
    if check:
        shown.insert(rng.randrange(len(shown) + 1), reference)
    return Screen(JudgementFormat.rank, reference, tuple(shown), project.picks)


def _every_key(project: Project, ids: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """Every random screen's key, as positions in `ids`: (reference, lo, hi) with room
    between lo and hi for the middle items."""
    n = len(ids)
    if project.judgement is RatingFormat.odd_one_out:
        yield from combinations(range(n), 3)
        return
    middle = project.shown - 2
    for reference in range(n):
        for lo in range(n):
            for hi in range(lo + middle + 1, n):
                between = hi - lo - 1 - (lo < reference < hi)
                if lo != reference and hi != reference and between >= middle:
                    yield reference, lo, hi


def _key_count(project: Project, n: int) -> int:
    if project.judgement is RatingFormat.odd_one_out:
        return n * (n - 1) * (n - 2) // 6
    return n * n * (n - 1) // 2


def _from_key(
    project: Project, ids: np.ndarray, key: tuple[int, int, int], rng: random.Random
) -> Screen:
    """A random screen with this key (positions in `ids`), its items in random order."""
    if project.judgement is RatingFormat.odd_one_out:
        shown = [int(ids[at]) for at in key]
        rng.shuffle(shown)
        return Screen(JudgementFormat.odd_one_out, None, tuple(shown), 1)
    reference, lo, hi = key
    between = [at for at in range(lo + 1, hi) if at != reference]
    shown = [int(ids[at]) for at in [lo, hi, *rng.sample(between, project.shown - 2)]]
    rng.shuffle(shown)
    return Screen(JudgementFormat.rank, int(ids[reference]), tuple(shown), project.picks)


def draw_unseen(
    project: Project,
    ids: np.ndarray,
    check: bool,
    draws: Draws,
    was_served: Callable[[ScreenKey], bool],
    served_keys: Callable[[], set[ScreenKey]],
) -> Screen | None:
    """A screen (or check) the rater was never served: the first of a few drawn, else one
    found against every key they were served (`served_keys`, read once); None once the
    study has none left for them."""
    if len(ids) < screen_size(project):
        return None
    rng = draws.search_rng()
    for _ in range(RANDOM_DRAWS):
        screen = _drawn(project, ids, rng, check)
        if not was_served(screen.key):
            return screen
    seen = served_keys()
    if check or _key_count(project, len(ids)) > MOST_ENUMERATED:
        for _ in range(MORE_DRAWS):
            screen = _drawn(project, ids, rng, check)
            if screen.key not in seen:
                return screen
        return None
    unseen = [
        key
        for key in _every_key(project, ids)
        if (int(ids[key[0]]), int(ids[key[1]]), int(ids[key[2]])) not in seen
    ]
    return _from_key(project, ids, rng.choice(unseen), rng) if unseen else None


def around(
    project: Project, ids: np.ndarray, triplet: tuple[int, int, int], rng: random.Random
) -> Screen | None:
    """A screen of the study's format that asks a proposed triplet (anchor, lo, hi): a
    rank screen with the anchor as reference and lo and hi among its items (the rest
    drawn), an odd-one-out of the three; None if the study has too few items."""
    anchor, lo, hi = triplet
    if project.judgement is RatingFormat.odd_one_out:
        shown = [anchor, lo, hi]
        rng.shuffle(shown)
        return Screen(JudgementFormat.odd_one_out, None, tuple(shown), 1)
    others = [int(item) for item in ids if item not in triplet]
    if len(others) < project.shown - 2:
        return None
    shown = [lo, hi, *rng.sample(others, project.shown - 2)]
    rng.shuffle(shown)
    return Screen(JudgementFormat.rank, anchor, tuple(shown), project.picks)


def expected_answer(format: JudgementFormat, picks: int, allow_cant_tell: bool = True) -> str:
    """What an answer to the screen must send, in words (for a refused one)."""
    if format is JudgementFormat.sort:
        return sorting.expected_sides(allow_cant_tell)
    if format is JudgementFormat.triplet:
        return 'this query is a triplet: answer with "choice" ("left" or "right")'
    if format is JudgementFormat.odd_one_out:
        return 'this query is an odd-one-out: answer with "picks", the key of the odd one'
    return (
        f'this query is a rank screen: answer with "picks", the keys of {picks} of the '
        "items shown, most alike first"
    )


def picked_ids(
    format: JudgementFormat, shown: list[int], picks: int, keys: dict[int, str], sent: list[str]
) -> list[int] | str:
    """The item ids the rater picked, or what is wrong with `sent` (the keys they sent)."""
    wrong = expected_answer(format, picks)
    if len(sent) != picks:
        return f"{wrong}; got {len(sent)} key{'' if len(sent) == 1 else 's'}"
    if len(set(sent)) != len(sent):
        return f"{wrong}; a key was sent twice"
    by_key = {keys[item]: item for item in shown if item in keys}
    stray = [key for key in sent if key not in by_key]
    if stray:
        return f"{wrong}; {stray[0]!r} is not one of the items shown"
    return [by_key[key] for key in sent]


def check_passed(format: JudgementFormat, reference: int | None, shown: list, picked: list) -> bool:
    """Whether a check was answered as it must be: the reference picked first (rank), the
    item shown once picked as the odd one."""
    if format is JudgementFormat.rank:
        return picked[0] == reference
    return shown.count(picked[0]) == 1


def implied_triplets(
    format: JudgementFormat, reference: int | None, shown: list[int], picked: list[int]
) -> np.ndarray:
    """The triplets (anchor, closer, farther) one answered screen implies."""
    if format is JudgementFormat.odd_one_out:
        return odd_one_out_triplets([shown], [picked[0]])[0]
    return rank_triplets([reference], [shown], [picked])[0]
