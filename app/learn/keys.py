"""Query keys: a query ``(anchor, {p, q})`` packed into one int64, three item ids of
`ID_BITS` bits each. Numpy alone, so that the web side can key queries without loading
the learners."""

from __future__ import annotations

import numpy as np

ID_BITS = 21
MAX_ITEMS = 1 << ID_BITS  # item ids are packed three to an int64 query key
ID_MASK = MAX_ITEMS - 1


def query_keys(anchor: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """One int64 per unordered query ``(anchor, {p, q})``."""
    lo, hi = np.minimum(p, q), np.maximum(p, q)
    return (anchor.astype(np.int64) << (2 * ID_BITS)) | (lo.astype(np.int64) << ID_BITS) | hi


def unpack_query_keys(keys: np.ndarray) -> np.ndarray:
    """The queries ``(anchor, lower, higher)`` that `query_keys` packed."""
    keys = np.asarray(keys, dtype=np.int64)
    return np.stack([keys >> (2 * ID_BITS), (keys >> ID_BITS) & ID_MASK, keys & ID_MASK], axis=1)
