"""How many queries a comparison-based tree asks: the expectation a running build's
progress and a build's cost estimate both use. Only numpy here, so the web process can
estimate a build before it starts without loading the forest's heavy packages."""

from __future__ import annotations

import functools

import numpy as np

# Subtrees up to this size get the exact expectation below; beyond, it grows as m log m.
_EXACT_SUBTREE = 4096


@functools.lru_cache(maxsize=16)
def _subtree_queries(leaf_size: int, per_screen: int = 1) -> np.ndarray:
    """Expected queries to grow a subtree from a node of m members, for m up to
    `_EXACT_SUBTREE`: the node asks every member but its two pivots, and its children's
    sizes follow the split of two random pivots' nearest-pivot cells (a triangular law
    around the middle). Whole offline builds on digits take within 6% of it; late in a
    build, when small nodes dominate (they split less evenly), up to 20% more. With
    `per_screen` > 1, the screens that ask them, a node's members that many at a time."""
    size = _EXACT_SUBTREE
    expected = np.zeros(size + 1)
    for m in range(leaf_size + 1, size + 1):
        k = np.arange(1, m)
        weights = np.minimum(k, m - k).astype(np.float64)
        weights /= weights.sum()
        asked = -(-(m - 2) // per_screen)
        expected[m] = asked + weights @ (expected[1:m] + expected[m - 1 : 0 : -1])
    return expected


def expected_subtree_queries(sizes: np.ndarray, leaf_size: int, per_screen: int = 1) -> np.ndarray:
    """Expected queries to grow subtrees from nodes of `sizes` members (with `per_screen`
    > 1: the sorting screens that ask them, each node's members on screens of that many)."""
    exact = _subtree_queries(int(leaf_size), int(per_screen))
    sizes = np.asarray(sizes, dtype=np.int64)
    out = exact[np.minimum(sizes, _EXACT_SUBTREE)]
    big = sizes > _EXACT_SUBTREE
    if big.any():
        ratio = exact[-1] / (_EXACT_SUBTREE * np.log(_EXACT_SUBTREE / leaf_size))
        out[big] = ratio * sizes[big] * np.log(sizes[big] / leaf_size)
    return out
