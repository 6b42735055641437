"""The triplets a judgement implies, whatever the screen that asked it.

A judgement is one screen a person answered: a triplet, an odd-one-out of three, a "pick
the k most similar to the reference among n" grid, or a sorting screen (items tapped
towards the pivot each resembles more). Every learner here learns from triplets
``(anchor, closer, farther)``; these functions expand judgements into them, each triplet
with the row of the judgement it came from. Triplets of one judgement are not
independent (one tap made them all): `group_folds` keeps them on one side of a split.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

LEFT, RIGHT, CANT_TELL = 0, 1, -1


def _int_rows(values, name: str, width: int | None = None) -> np.ndarray:
    array = np.asarray(values)
    if array.size == 0:
        array = array.reshape((0,) if width is None else (0, width))
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integer item ids; got dtype {array.dtype}")
    if width is None:
        if array.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional; got shape {array.shape}")
    elif array.ndim != 2 or (width > 0 and array.shape[1] != width):
        raise ValueError(f"{name} must have shape (m, {width}); got {array.shape}")
    return array.astype(np.int64, copy=False)


def _distinct_rows(rows: np.ndarray, name: str) -> None:
    ordered = np.sort(rows, axis=1)
    repeated = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
    if repeated.any():
        row = int(np.flatnonzero(repeated)[0])
        raise ValueError(f"{name} row {row} shows an item twice: {rows[row].tolist()}")


def checked_odd_one_out(shown, odd) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Odd-one-out judgements checked, naming the row at fault: the items shown (m, 3),
    the odd one of each (m,), and the pair of the other two (m, 2)."""
    shown = _int_rows(shown, "shown", 3)
    odd = _int_rows(odd, "odd")
    if len(odd) != len(shown):
        raise ValueError(f"odd must have one item per judgement ({len(shown)}); got {len(odd)}")
    _distinct_rows(shown, "shown")
    is_odd = shown == odd[:, None]
    missing = ~is_odd.any(axis=1)
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise ValueError(f"odd row {row}: {odd[row]} is not one of {shown[row].tolist()}")
    return shown, odd, shown[~is_odd].reshape(len(shown), 2)


def odd_one_out_triplets(shown, odd) -> tuple[np.ndarray, np.ndarray]:
    """Odd-one-out judgements: of the three items in each row of `shown` (m, 3), `odd`
    (m,) is the one least like the other two. Each implies two triplets: each of the
    other two is closer to its partner than to the odd one. Returns the triplets (2m, 3)
    and, for each, the row of its judgement."""
    shown, odd, pair = checked_odd_one_out(shown, odd)
    first = np.column_stack([pair[:, 0], pair[:, 1], odd])
    second = np.column_stack([pair[:, 1], pair[:, 0], odd])
    triplets = np.stack([first, second], axis=1).reshape(-1, 3)
    return triplets, np.repeat(np.arange(len(shown)), 2)


def rank_triplet_count(shown: int, picks: int) -> int:
    """How many triplets one "pick `picks` of `shown`" judgement implies."""
    return picks * (shown - picks) + picks * (picks - 1) // 2


def rank_triplets(reference, shown, picks) -> tuple[np.ndarray, np.ndarray]:
    """ "Pick the k most similar to the reference" judgements: row i showed `shown[i]`
    (m, n) beside `reference[i]` and the person picked `picks[i]` (m, k), most similar
    first. Every picked item is closer to the reference than every unpicked one, and
    each pick closer than the picks after it: k(n-k) + k(k-1)/2 triplets a judgement.
    Returns the triplets and, for each, the row of its judgement."""
    reference = _int_rows(reference, "reference")
    shown = _int_rows(shown, "shown", 0)
    picks = _int_rows(picks, "picks", 0)
    m = len(reference)
    if len(shown) != m or len(picks) != m:
        raise ValueError(
            f"reference, shown and picks must have one row per judgement; got {m}, "
            f"{len(shown)} and {len(picks)}"
        )
    n, k = shown.shape[1], picks.shape[1]
    if not 1 <= k < n:
        raise ValueError(f"picks must be at least 1 and fewer than the {n} items shown; got {k}")
    _distinct_rows(shown, "shown")
    _distinct_rows(picks, "picks")
    if (shown == reference[:, None]).any():
        row = int(np.flatnonzero((shown == reference[:, None]).any(axis=1))[0])
        raise ValueError(f"shown row {row} includes its reference {reference[row]}")
    picked = (shown[:, :, None] == picks[:, None, :]).any(axis=2)
    stray = picked.sum(axis=1) != k
    if stray.any():
        row = int(np.flatnonzero(stray)[0])
        raise ValueError(
            f"picks row {row}: {picks[row].tolist()} are not all among {shown[row].tolist()}"
        )
    unpicked = shown[~picked].reshape(m, n - k)
    closer = np.broadcast_to(picks[:, :, None], (m, k, n - k)).reshape(m, -1)
    farther = np.broadcast_to(unpicked[:, None, :], (m, k, n - k)).reshape(m, -1)
    first, later = np.triu_indices(k, 1)
    closer = np.concatenate([closer, picks[:, first]], axis=1)
    farther = np.concatenate([farther, picks[:, later]], axis=1)
    per = closer.shape[1]
    triplets = np.column_stack([np.repeat(reference, per), closer.reshape(-1), farther.reshape(-1)])
    return triplets, np.repeat(np.arange(m), per)


def sort_triplets(pivots, items, sides) -> tuple[np.ndarray, np.ndarray]:
    """Sorting screens: row i showed two `pivots[i]` (m, 2) and items `items[i]` (m, s),
    and the person put each item with the pivot it resembles more: `sides[i]` (m, s)
    holds LEFT (0, the first pivot), RIGHT (1) or CANT_TELL (-1). Each item sorted
    implies one triplet (item, its pivot, the other pivot); "can't tell" implies none.
    Returns the triplets and, for each, the row of its judgement."""
    pivots = _int_rows(pivots, "pivots", 2)
    items = _int_rows(items, "items", 0)
    sides = np.asarray(sides)
    if sides.shape != items.shape:
        raise ValueError(f"sides must have the shape of items {items.shape}; got {sides.shape}")
    if not np.isin(sides, (LEFT, RIGHT, CANT_TELL)).all():
        raise ValueError("sides must hold 0 (left pivot), 1 (right pivot) or -1 (can't tell)")
    if len(pivots) != len(items):
        raise ValueError(
            f"pivots and items must have one row per judgement; got {len(pivots)} and {len(items)}"
        )
    rows, columns = np.nonzero(sides != CANT_TELL)
    chosen = sides[rows, columns].astype(np.int64)
    triplets = np.column_stack(
        [items[rows, columns], pivots[rows, chosen], pivots[rows, 1 - chosen]]
    )
    return triplets, rows.astype(np.int64)


def whole_groups(groups, eligible=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The groups (judgements) a split may hold out: those whose every row is `eligible`
    (default all). Returns the group of each row (an index into the sorted distinct
    labels), each group's size, and per group whether it may be held out."""
    groups = np.asarray(groups)
    if groups.ndim != 1:
        raise ValueError(f"groups must be one-dimensional; got shape {groups.shape}")
    names, of_row = np.unique(groups, return_inverse=True)
    sizes = np.bincount(of_row, minlength=len(names))
    whole = np.ones(len(names), dtype=bool)
    if eligible is not None:
        np.logical_and.at(whole, of_row, np.asarray(eligible, dtype=bool))
    return of_row, sizes, whole


def group_folds(groups, n_splits: int, random_state=None, eligible=None) -> list:
    """Cross-validation folds that keep every group (the triplets of one judgement)
    whole on one side: (fit rows, held-out rows) over ``range(len(groups))``. Held-out
    rows come only from `eligible` rows (default all); a group with any row not eligible
    is always fitted."""
    if not isinstance(n_splits, Integral) or n_splits < 2:
        raise ValueError(f"n_splits must be an integer >= 2; got {n_splits!r}")
    of_row, _, whole = whole_groups(groups, eligible)
    candidates = np.flatnonzero(whole)
    every = np.arange(len(of_row))
    if len(candidates) < n_splits:
        return []
    # Imported here: the rating path expands answered screens with this module, and a
    # web process starts without scikit-learn.
    from sklearn.model_selection import KFold

    splitter = KFold(n_splits=n_splits, shuffle=True, random_state=random_state)
    folds = []
    for _, held in splitter.split(np.empty((len(candidates), 1))):
        held_rows = np.flatnonzero(np.isin(of_row, candidates[held]))
        folds.append((np.setdiff1d(every, held_rows, assume_unique=True), held_rows))
    return folds
