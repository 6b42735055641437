"""The noise ceiling (issue 57): the other raters' majority predicting each rater's
choice on the screens several answered, with a bootstrap interval over screens; on a
planted study it finds what the planted model itself would score."""

from __future__ import annotations

import numpy as np
import pytest

from app.learn.ceiling import noise_ceiling


def test_each_answer_is_predicted_by_the_others_majority_a_tie_a_share():
    # Screen 0: raters 0, 1, 2 chose 5, 5, 7. Rater 0 against (5, 7): a tie, half a hit;
    # rater 1 the same; rater 2 against (5, 5): a miss. Screen 1: one rater, not counted.
    # Screen 2: both chose 3: two hits. Rater 1 answered screen 0 again (7): their first
    # answer counts between raters, the second measures them against it.
    found = noise_ceiling(
        screen=[0, 0, 0, 1, 2, 2, 0],
        rater=[0, 1, 2, 0, 3, 4, 1],
        choice=[5, 5, 7, 9, 3, 3, 7],
    )
    assert found.accuracy == pytest.approx(3 / 5)
    # Each screen's majority, the rater included: 2 of 3, then 2 of 2.
    assert found.majority_share == pytest.approx(4 / 5)
    assert (found.screens, found.answers, found.raters) == (2, 5, 5)
    assert found.within_rater == 0 and found.within_rater_pairs == 1
    assert found.low <= found.accuracy <= found.high


def test_no_screen_answered_twice_has_no_ceiling():
    assert noise_ceiling(screen=[0, 1, 2], rater=[0, 0, 1], choice=[1, 2, 3]) is None
    # One rater twice is a measure of that rater, not of the crowd.
    alone = noise_ceiling(screen=[0, 0], rater=[4, 4], choice=[1, 1])
    assert alone is None


def test_on_a_planted_study_it_finds_the_planted_models_own_accuracy():
    """Odd-one-out screens each answered by 25 raters drawing from the planted softmax:
    the majority of the others is nearly always the likeliest odd one, so the ceiling is
    the planted model's expected accuracy (the mean of each screen's top probability),
    inside the interval, a little below it, and the screens' own majority share a little
    above."""
    rng = np.random.default_rng(3)
    screens, raters = 300, 25
    scores = rng.gamma(2.0, 1.0, (screens, 3))
    p = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    drawn = (rng.random((screens, raters, 1)) > np.cumsum(p, axis=1)[:, None, :]).sum(axis=2)
    found = noise_ceiling(
        screen=np.repeat(np.arange(screens), raters),
        rater=np.tile(np.arange(raters), screens),
        choice=drawn.ravel(),
    )
    expected = float(p.max(axis=1).mean())
    assert found.low <= expected <= found.high
    assert abs(found.accuracy - expected) < 0.02
    assert found.accuracy < expected < found.majority_share < expected + 0.03
    assert 0.01 < found.high - found.low < 0.08
    assert found.within_rater is None and found.raters == raters
