"""The one canonical triplet format, its validation, and simulated triplets."""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state


def check_triplets(triplets, n_items: int | None = None, name: str = "triplets") -> np.ndarray:
    """Return ``triplets`` as a C-contiguous ``(m, 3)`` int64 array, or raise ValueError.

    Each row is ``(anchor, closer, farther)`` (or a query ``(anchor, p, q)``): three
    different items, ids in ``0..n_items-1``.
    """
    array = np.asarray(triplets)
    if array.size == 0 and array.ndim <= 2:
        return np.empty((0, 3), dtype=np.int64)
    if array.ndim != 2 or array.shape[1] != 3:
        raise ValueError(f"{name} must have shape (m, 3); got {array.shape}")
    if array.dtype.kind not in "iu":
        integral = (
            array.dtype.kind == "f"
            and np.all(np.isfinite(array))
            and np.all(array == np.round(array))
        )
        if not integral:
            raise ValueError(f"{name} must hold integer item ids; got dtype {array.dtype}")
    array = np.ascontiguousarray(array, dtype=np.int64)
    if array.min() < 0:
        row = int(np.argmin(array.min(axis=1)))
        raise ValueError(f"{name}[{row}] has a negative item id: {array[row].tolist()}")
    if n_items is not None and array.max() >= n_items:
        row = int(np.argmax(array.max(axis=1)))
        raise ValueError(
            f"{name}[{row}] names item {int(array[row].max())}, but there are only {n_items} items"
        )
    repeated = (
        (array[:, 0] == array[:, 1]) | (array[:, 0] == array[:, 2]) | (array[:, 1] == array[:, 2])
    )
    if repeated.any():
        row = int(np.argmax(repeated))
        raise ValueError(f"{name}[{row}] repeats an item: {array[row].tolist()}")
    return array


def random_queries(n_items: int, n_queries: int, random_state=None) -> np.ndarray:
    """``n_queries`` uniformly random queries ``(anchor, p, q)`` of three different items."""
    if n_items < 3:
        raise ValueError(f"n_items must be at least 3 to form a triplet; got {n_items}")
    if n_queries < 0:
        raise ValueError(f"n_queries must be non-negative; got {n_queries}")
    rng = check_random_state(random_state)
    anchor = rng.randint(0, n_items, size=n_queries)
    # Draw p and q from the other n-1 (then n-2) items, shifting past those already used.
    p = rng.randint(0, n_items - 1, size=n_queries)
    p += p >= anchor
    q = rng.randint(0, n_items - 2, size=n_queries)
    low, high = np.minimum(anchor, p), np.maximum(anchor, p)
    q += q >= low
    q += q >= high
    return np.stack([anchor, p, q], axis=1).astype(np.int64)


def random_triplets(n_items: int, n_triplets: int, oracle, random_state=None) -> np.ndarray:
    """Random queries answered by ``oracle``: an ``(n_triplets, 3)`` array of triplets."""
    return oracle.answer(random_queries(n_items, n_triplets, random_state))
