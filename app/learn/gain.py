"""What asking actively saved (issue 57), from a study's own arms: an arm asked actively
and an arm asked at random, each model refitted on the first answers of each arm, all
measured on the same held-out answers (asked at random, fitted by none of them).

The random arm's curve (held-out error against answers fitted) says how many answers
random questions need to reach an error; the active gain is the answers the random arm
needs to reach the active arm's error at its current count, against that count (a ratio
of 2: asking actively did with half the answers; 1 or less: it saved nothing).

The curve is read as its lower envelope (the best error reached by that many answers or
fewer: one fit's noise does not move the crossing back) and interpolated linearly in the
logarithm of the answers between the points around the crossing. Where the random arm
never reached the active arm's error, the answers it needs are beyond its last point: a
lower bound, not a figure. The interval is a percentile bootstrap over the held-out
screens (the unit measured; a screen's answers move together), with the fits held fixed:
it is the uncertainty of the measurement, not of another run of the study.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Needed:
    """The answers random questions need to reach an error: `answers` where the curve
    crossed it; `beyond` (more than the curve's last point) or `within` (no more than its
    first) where it did not, `answers` then being that bound."""

    answers: float
    beyond: bool = False
    within: bool = False


def answers_needed(counts: np.ndarray, errors: np.ndarray, target: float) -> Needed:
    """The answers the curve (`errors` at ascending `counts`) needs to reach `target`."""
    counts = np.asarray(counts, float)
    envelope = np.minimum.accumulate(np.asarray(errors, float))
    reached = np.flatnonzero(envelope <= target)
    if not len(reached):
        return Needed(float(counts[-1]), beyond=True)
    first = int(reached[0])
    if first == 0:
        return Needed(float(counts[0]), within=True)
    above, below = envelope[first - 1], envelope[first]
    share = (above - target) / (above - below)
    low, high = np.log(counts[first - 1]), np.log(counts[first])
    return Needed(float(np.exp(low + share * (high - low))))


@dataclass(frozen=True)
class Gain:
    """Against the active arm's `answers` (its error `error`), the random arm's
    answers needed (`needed`, within [`low`, `high`] at `level`), and the ratio
    needed / answers with its interval. A bound (beyond the random arm's last point, or
    within its first) is said in `needed`; an interval end that is a bound is that bound
    with its flag."""

    answers: int
    error: float
    needed: Needed
    low: Needed
    high: Needed
    level: float

    @property
    def ratio(self) -> float:
        return self.needed.answers / self.answers


def losses_per_answer(near: np.ndarray, far: np.ndarray, placed: np.ndarray) -> np.ndarray:
    """Per held-out answer (anchor closer to `near` than to `far` by its person): 1 where
    a model's distances disagree, 0.5 on a tie, and 0.5 where the model places none of
    its items (`placed` false: it cannot say, and is scored as a coin)."""
    loss = (near > far) + 0.5 * (near == far)
    return np.where(placed, loss, 0.5).astype(float)


# Resamples drawn at a time: (chunk, screens) weights stay a few megabytes.
_CHUNK = 50


def bootstrap_errors(
    losses: np.ndarray, groups: np.ndarray, resamples: int, random_state: int
) -> np.ndarray:
    """(resamples, fits) errors: each resample draws the held-out screens (`groups`, one
    label per answer) with replacement, and each fit's (row of `losses`) error is the
    mean over the answers of the screens drawn, as often as drawn."""
    losses = np.atleast_2d(losses)
    labels, of_answer = np.unique(groups, return_inverse=True)
    sums = np.zeros((len(losses), len(labels)))
    for row, loss in enumerate(losses):
        sums[row] = np.bincount(of_answer, weights=loss, minlength=len(labels))
    sizes = np.bincount(of_answer, minlength=len(labels)).astype(float)
    rng = np.random.default_rng(random_state)
    errors = np.empty((resamples, len(losses)))
    for start in range(0, resamples, _CHUNK):
        size = min(_CHUNK, resamples - start)
        drawn = rng.integers(0, len(labels), size=(size, len(labels)))
        times = np.zeros((size, len(labels)))
        np.add.at(times, (np.arange(size)[:, None], drawn), 1.0)
        errors[start : start + size] = (times @ sums.T) / (times @ sizes)[:, None]
    return errors


def active_gain(
    random_counts: np.ndarray,
    random_losses: np.ndarray,
    active_answers: int,
    active_losses: np.ndarray,
    groups: np.ndarray,
    *,
    level: float = 0.95,
    resamples: int = 1000,
    random_state: int = 0,
) -> Gain:
    """The gain of an active arm whose fit on its `active_answers` scored
    `active_losses` (one per held-out answer), against the random arm's fits at
    `random_counts` scoring `random_losses` (one row per count), on the held-out answers
    of screens `groups`."""
    random_losses = np.atleast_2d(random_losses)
    error = float(active_losses.mean())
    needed = answers_needed(random_counts, random_losses.mean(axis=1), error)
    resampled = bootstrap_errors(
        np.vstack([random_losses, active_losses]), groups, resamples, random_state
    )
    random_errors, active_errors = resampled[:, :-1], resampled[:, -1]
    found = [
        answers_needed(random_counts, curve, target)
        for curve, target in zip(random_errors, active_errors, strict=True)
    ]
    # Bounds sort as what they bound: beyond the last point above every figure, within
    # the first below.
    order = sorted(found, key=lambda each: (each.within is False, each.beyond, each.answers))
    tail = (1 - level) / 2
    low = order[int(np.floor(tail * (resamples - 1)))]
    high = order[int(np.ceil((1 - tail) * (resamples - 1)))]
    return Gain(int(active_answers), error, needed, low, high, level)


def error_interval(
    losses: np.ndarray,
    groups: np.ndarray,
    level: float = 0.95,
    resamples: int = 1000,
    random_state: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `losses` (a fit's losses on the held-out answers), the bootstrap
    interval of its error over the held-out screens."""
    errors = bootstrap_errors(losses, groups, resamples, random_state)
    tail = (1 - level) / 2
    return np.quantile(errors, tail, axis=0), np.quantile(errors, 1 - tail, axis=0)
