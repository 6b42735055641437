"""The one canonical triplet format and its validation."""

from __future__ import annotations

import numpy as np


def check_triplets(triplets, n_items: int | None = None) -> np.ndarray:
    """Return ``triplets`` as a C-contiguous ``(m, 3)`` int64 array, or raise ValueError.

    Each row is ``(anchor, closer, farther)``: the anchor is closer to the second item
    than to the third. Rows must name three different items, ids in ``0..n_items-1``.
    """
    array = np.asarray(triplets)
    if array.size == 0:
        return np.empty((0, 3), dtype=np.int64)
    if array.ndim != 2 or array.shape[1] != 3:
        raise ValueError(f"triplets must have shape (m, 3); got {array.shape}")
    if array.dtype.kind not in "iu":
        if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == np.round(array)):
            array = array.astype(np.int64)
        else:
            raise ValueError(f"triplets must hold integer item ids; got dtype {array.dtype}")
    array = np.ascontiguousarray(array, dtype=np.int64)
    if array.min() < 0:
        row = int(np.argmin(array.min(axis=1)))
        raise ValueError(f"triplet {row} has a negative item id: {array[row].tolist()}")
    if n_items is not None and array.max() >= n_items:
        row = int(np.argmax(array.max(axis=1)))
        raise ValueError(f"triplet {row} names item {int(array[row].max())}, "
                         f"but there are only {n_items} items")
    repeated = (array[:, 0] == array[:, 1]) | (array[:, 0] == array[:, 2]) | (array[:, 1] == array[:, 2])
    if repeated.any():
        row = int(np.argmax(repeated))
        raise ValueError(f"triplet {row} repeats an item: {array[row].tolist()}")
    return array
