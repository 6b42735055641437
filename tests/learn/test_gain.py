"""The active gain's arithmetic (app/learn/gain.py): the answers a random arm's curve needs
for an error, read on its lower envelope in the logarithm of the answers, bounds where
the curve never gets there, and a bootstrap interval over held-out screens that holds a
planted gain."""

from __future__ import annotations

import numpy as np
import pytest

from app.learn.gain import active_gain, answers_needed, error_interval, losses_per_answer

COUNTS = np.array([100, 200, 400, 800, 1600])


def test_the_answers_needed_are_read_between_the_points_in_the_logarithm():
    errors = np.array([0.40, 0.30, 0.20, 0.15, 0.10])
    # Halfway between 0.30 (200) and 0.20 (400): the geometric middle, not 300.
    found = answers_needed(COUNTS, errors, 0.25)
    assert found.answers == pytest.approx(np.sqrt(200 * 400))
    assert not found.beyond and not found.within
    assert answers_needed(COUNTS, errors, 0.20).answers == pytest.approx(400)


def test_a_curve_that_never_gets_there_gives_a_bound_not_a_figure():
    errors = np.array([0.40, 0.30, 0.20, 0.15, 0.10])
    beyond = answers_needed(COUNTS, errors, 0.05)
    assert beyond.beyond and beyond.answers == 1600
    within = answers_needed(COUNTS, errors, 0.45)
    assert within.within and within.answers == 100


def test_a_noisy_point_does_not_move_the_crossing_back():
    # 0.18 at 400 is noise: the error reached by 800 answers or fewer is still 0.18.
    errors = np.array([0.40, 0.30, 0.18, 0.22, 0.10])
    assert answers_needed(COUNTS, errors, 0.19).answers < 400


def test_a_model_that_places_neither_item_is_scored_as_a_coin():
    near, far = np.array([1.0, 2.0, 1.0, 0.0]), np.array([2.0, 1.0, 1.0, 0.0])
    placed = np.array([True, True, True, False])
    assert losses_per_answer(near, far, placed).tolist() == [0.0, 1.0, 0.5, 0.5]


def test_a_planted_gain_of_four_lies_in_its_interval_and_none_in_a_random_arms():
    rng = np.random.default_rng(3)
    screens = 4000
    groups = np.repeat(np.arange(screens), 2)  # two answers a screen (an odd-one-out)

    def losses(error: float) -> np.ndarray:
        return (rng.random(2 * screens) < error).astype(float)

    # The random arm's error falls by 0.05 each time its answers double.
    random_errors = np.array([0.40, 0.35, 0.30, 0.25, 0.20])
    random_losses = np.array([losses(error) for error in random_errors])
    # The active arm reaches at 400 answers what the random arm reaches at 1,600.
    found = active_gain(COUNTS, random_losses, 400, losses(0.20), groups, random_state=0)
    assert 2.5 < found.ratio < 6
    assert found.low.answers < 4 * 400 < found.high.answers or found.high.beyond
    # An active arm no better than random questions: its interval holds no gain.
    same = active_gain(COUNTS, random_losses, 400, losses(0.30), groups, random_state=0)
    assert same.low.answers <= 400 <= same.high.answers
    low, high = error_interval(random_losses, groups)
    assert np.all(low < random_errors + 0.02) and np.all(random_errors - 0.02 < high)
