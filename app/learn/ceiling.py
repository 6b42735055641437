"""The noise ceiling of a study (issue 57): how well any model could predict a person's
choice on a screen, measured by how well the other people who answered the same screen
predict it.

Each answer to a screen that other raters answered too is predicted by the majority of
their choices there (leave that rater out): a hit where its choice is the majority's, a
share of one where several choices tie for it. The ceiling is the mean over those
answers; its interval is a percentile bootstrap over screens (the unit that was sampled:
answers to one screen move together). A rater who answered a screen twice counts once
between raters (their first answer), and their two answers give the within-rater
consistency: the share that agree.

The others' majority is a floor of what a model could score (a model that knew each
screen's likeliest choice would do better: the majority of a few others misses it at
times); the screens' own majority share (the share of answers that agree with their
screen's majority, the rater included: SPoSE's 67.2 % for THINGS) is a ceiling above it
(a majority of a few is found where chance put it). Between them lies the accuracy of
the likeliest choice itself: on planted odd-one-out screens, midway at every number of
raters a screen (benchmarks/noise_ceiling.py), 6 points apart with 10 raters a screen,
3 with 20.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Ceiling:
    """`accuracy` within [`low`, `high`] (the bootstrap interval at `level`), from
    `answers` answers to `screens` screens that two raters or more answered, by
    `raters` raters; `majority_share` the share of those answers that agree with their
    screen's majority (their own answer included); `within_rater` the agreement of a
    rater with themselves over `within_rater_pairs` screens they answered twice (None
    where none)."""

    accuracy: float
    majority_share: float
    low: float
    high: float
    level: float
    screens: int
    raters: int
    answers: int
    within_rater: float | None
    within_rater_pairs: int


def noise_ceiling(
    screen,
    rater,
    choice,
    *,
    level: float = 0.95,
    resamples: int = 1000,
    random_state: int = 0,
) -> Ceiling | None:
    """The ceiling of answers given as three arrays of one row per answer, oldest first:
    the screen answered (answers to the same screen share a number), who answered, and
    what they chose (an item id). None where no screen has answers of two raters."""
    screen = np.asarray(screen, np.int64)
    rater = np.asarray(rater, np.int64)
    choice = np.asarray(choice, np.int64)
    if not (len(screen) == len(rater) == len(choice)):
        raise ValueError("screen, rater and choice must hold one row per answer each")
    # Screens numbered in the order they were first answered: the interval's resamples
    # do not depend on how the caller numbered them.
    _, first_at, of_answer = np.unique(screen, return_index=True, return_inverse=True)
    screen = np.argsort(np.argsort(first_at))[of_answer]
    # A rater's first answer to each screen; their later ones measure them against it.
    order = np.lexsort((np.arange(len(screen)), rater, screen))
    screen, rater, choice = screen[order], rater[order], choice[order]
    first = np.ones(len(screen), bool)
    first[1:] = (screen[1:] != screen[:-1]) | (rater[1:] != rater[:-1])
    starts = np.flatnonzero(first)
    again = ~first
    within = None
    pairs = int(again.sum())
    if pairs:
        # Each repeat against the same rater's first answer to that screen.
        owner = starts[np.searchsorted(starts, np.flatnonzero(again), side="right") - 1]
        within = float(np.mean(choice[again] == choice[owner]))
    screen, rater, choice = screen[first], rater[first], choice[first]

    credits, sizes, tops, counted_raters = [], [], [], set()
    boundaries = np.flatnonzero(np.diff(screen)) + 1
    for chosen, who in zip(np.split(choice, boundaries), np.split(rater, boundaries), strict=True):
        if len(chosen) < 2:
            continue
        values, counts = np.unique(chosen, return_counts=True)
        own = np.searchsorted(values, chosen)
        # The others' counts, per answer: every choice's count less the answer's own.
        others = np.broadcast_to(counts, (len(chosen), len(values))).copy()
        others[np.arange(len(chosen)), own] -= 1
        top = others.max(axis=1, keepdims=True)
        modes = others == top
        hit = modes[np.arange(len(chosen)), own] / modes.sum(axis=1)
        credits.append(float(hit.sum()))
        sizes.append(len(chosen))
        tops.append(int(counts.max()))
        counted_raters.update(who.tolist())
    if not sizes:
        return None
    credit, size = np.array(credits), np.array(sizes, float)
    accuracy = float(credit.sum() / size.sum())
    rng = np.random.default_rng(random_state)
    estimates = []
    for start in range(0, resamples, 100):
        drawn = rng.integers(0, len(size), (min(100, resamples - start), len(size)))
        estimates.append(credit[drawn].sum(axis=1) / size[drawn].sum(axis=1))
    tail = (1 - level) / 2
    low, high = np.quantile(np.concatenate(estimates), [tail, 1 - tail])
    return Ceiling(
        accuracy=accuracy,
        majority_share=float(sum(tops) / size.sum()),
        low=float(low),
        high=float(high),
        level=level,
        screens=len(size),
        raters=len(counted_raters),
        answers=int(size.sum()),
        within_rater=within,
        within_rater_pairs=pairs,
    )
