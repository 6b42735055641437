"""Judgements of every format expand into the triplets they imply, and splits keep each
judgement's triplets together."""

from __future__ import annotations

import numpy as np
import pytest

from app.learn import triplet_error
from app.learn.judgements import (
    CANT_TELL,
    LEFT,
    RIGHT,
    group_folds,
    odd_one_out_triplets,
    rank_triplet_count,
    rank_triplets,
    sort_triplets,
)


def _as_set(triplets: np.ndarray) -> set[tuple[int, int, int]]:
    return {tuple(int(v) for v in row) for row in triplets}


def test_an_odd_one_out_implies_that_the_other_two_are_closer_to_each_other():
    triplets, rows = odd_one_out_triplets([[4, 7, 9], [1, 2, 3]], [7, 3])
    assert _as_set(triplets[rows == 0]) == {(4, 9, 7), (9, 4, 7)}
    assert _as_set(triplets[rows == 1]) == {(1, 2, 3), (2, 1, 3)}
    assert rows.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("shown", "odd", "message"),
    [
        ([[1, 2, 3]], [4], "odd row 0: 4 is not one of"),
        ([[1, 1, 3]], [3], "shows an item twice"),
        ([[1, 2]], [1], r"shape \(m, 3\)"),
        ([[1, 2, 3]], [1, 2], "one item per judgement"),
        ([[1.5, 2, 3]], [2], "integer item ids"),
    ],
)
def test_a_malformed_odd_one_out_is_refused_naming_its_row(shown, odd, message):
    with pytest.raises(ValueError, match=message):
        odd_one_out_triplets(shown, odd)


def test_a_rank_judgement_orders_picks_above_the_rest_and_among_themselves():
    triplets, rows = rank_triplets([0], [[5, 6, 7, 8]], [[7, 5]])
    assert _as_set(triplets) == {
        (0, 7, 6),
        (0, 7, 8),
        (0, 5, 6),
        (0, 5, 8),
        (0, 7, 5),  # the first pick is closer than the second
    }
    assert len(triplets) == rank_triplet_count(4, 2) == 5
    assert rows.tolist() == [0] * 5


@pytest.mark.parametrize(("n", "k"), [(3, 1), (8, 2), (12, 11), (8, 1)])
def test_judgements_made_by_true_distances_imply_only_true_triplets(n, k):
    """A person who picks by the planted distances (and an odd one out the same way)
    gives triplets the planted points satisfy, one judgement making as many as it says."""
    rng = np.random.default_rng(n * 100 + k)
    points = rng.normal(size=(60, 3))
    m = 50
    chosen = np.array([rng.choice(60, n + 1, replace=False) for _ in range(m)])
    reference, shown = chosen[:, 0], chosen[:, 1:]
    distance = np.linalg.norm(points[shown] - points[reference][:, None], axis=2)
    picks = np.take_along_axis(shown, np.argsort(distance, axis=1)[:, :k], axis=1)
    triplets, rows = rank_triplets(reference, shown, picks)
    assert len(triplets) == m * rank_triplet_count(n, k)
    assert triplet_error(points, triplets) == 0.0
    assert np.bincount(rows).tolist() == [rank_triplet_count(n, k)] * m

    three = chosen[:, :3]
    # The odd one out is the item outside the closest pair.
    pair_distance = np.stack(
        [
            np.linalg.norm(points[three[:, a]] - points[three[:, b]], axis=1)
            for a, b in [(1, 2), (0, 2), (0, 1)]
        ],
        axis=1,
    )
    odd = three[np.arange(m), pair_distance.argmin(axis=1)]
    odd_triplets, _ = odd_one_out_triplets(three, odd)
    assert triplet_error(points, odd_triplets) == 0.0


@pytest.mark.parametrize(
    ("reference", "shown", "picks", "message"),
    [
        ([0], [[1, 2, 3]], [[4]], "picks row 0: .* not all among"),
        ([0], [[1, 2, 3]], [[1, 1]], "shows an item twice"),
        ([0], [[0, 2, 3]], [[2]], "includes its reference"),
        ([0], [[1, 2, 3]], [[1, 2, 3]], "fewer than the 3 items shown"),
        ([0, 1], [[1, 2, 3]], [[2]], "one row per judgement"),
    ],
)
def test_a_malformed_rank_judgement_is_refused(reference, shown, picks, message):
    with pytest.raises(ValueError, match=message):
        rank_triplets(reference, shown, picks)


def test_a_sorting_screen_implies_one_triplet_per_item_sorted():
    triplets, rows = sort_triplets(
        [[10, 20], [30, 40]],
        [[1, 2, 3], [4, 5, 6]],
        [[LEFT, RIGHT, CANT_TELL], [RIGHT, RIGHT, LEFT]],
    )
    assert triplets.tolist() == [
        [1, 10, 20],
        [2, 20, 10],
        [4, 40, 30],
        [5, 40, 30],
        [6, 30, 40],
    ]
    assert rows.tolist() == [0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="sides must hold"):
        sort_triplets([[10, 20]], [[1]], [[2]])


def test_folds_keep_every_judgement_on_one_side():
    groups = np.repeat(np.arange(40), 3)  # 40 judgements of three triplets each
    folds = group_folds(groups, 4, random_state=0)
    assert len(folds) == 4
    held_everywhere = np.concatenate([held for _, held in folds])
    assert np.array_equal(np.sort(held_everywhere), np.arange(120))  # each row held once
    for fit, held in folds:
        assert not set(groups[fit]) & set(groups[held])
        assert len(fit) + len(held) == 120


def test_folds_hold_out_only_whole_eligible_judgements():
    groups = np.repeat(np.arange(30), 2)
    eligible = np.ones(60, dtype=bool)
    eligible[[0, 11]] = False  # judgements 0 and 5 each have a row not to hold out
    folds = group_folds(groups, 3, random_state=1, eligible=eligible)
    held = np.concatenate([held for _, held in folds])
    assert not {0, 5} & set(groups[held].tolist())
    assert len(held) == 56
    assert group_folds(groups[:4], 3) == []  # two judgements cannot make three folds
