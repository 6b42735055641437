"""A one-dimensional embedding that does not fold. Gradient steps cannot carry an item
past the others on a line (each step towards its place is uphill while it passes them),
so a fit from a random start often ends with an item, or a few, at the wrong end. So:

- the line starts in the order spectral seriation gives: the Fiedler vector of how often
  each pair was judged the closer one (a pair judged close sits close), for up to
  SERIATED_MOST items (a dense eigenproblem);
- after the fit, each item whose answers are broken is tried in every gap between the
  others (at most GAPS of them, evenly spread by rank, and past both ends) and moved to
  the one where its answers hold best."""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh

GAPS = 64
SERIATED_MOST = 2_000
# An item moves where at most this share of the weight of its broken answers stays broken.
MENDS = 0.75


def seriated(triplets: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """(n, 1) positions with unit spread, in the order of the items' seriation."""
    closer = np.zeros((n, n))
    asked = np.zeros((n, n))
    anchor, near, far = triplets.T
    np.add.at(closer, (anchor, near), weights)
    np.add.at(asked, (anchor, near), weights)
    np.add.at(asked, (anchor, far), weights)
    closer, asked = closer + closer.T, asked + asked.T
    similar = np.divide(closer, asked, out=np.zeros((n, n)), where=asked > 0)
    # A little of every pair, so items never compared still make one connected graph.
    similar += 1e-3 * max(similar.mean(), 1e-12)
    np.fill_diagonal(similar, 0.0)
    laplacian = np.diag(similar.sum(axis=1)) - similar
    # The second eigenvector alone: a third of the full problem's time at 2,000 items,
    # and a t-ETE search seriates each fold's answers.
    _, vectors = eigh(laplacian, subset_by_index=[1, 1], driver="evr")
    fiedler = vectors[:, 0]
    return (fiedler / (fiedler.std() or 1.0))[:, None]


def unfolded(line: np.ndarray, triplets: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, int]:
    """(the line with items moved where their answers hold better, how many moved).
    `line` is (n, 1); a triplet (a, b, c) holds where b is nearer a than c is."""
    y = line[:, 0].copy()
    broken = _broken(y, triplets)
    if not broken.any():
        return line, 0
    rows_of = _rows_by_item(triplets, len(y))
    suspects = np.unique(triplets[broken])
    # The items with the most broken answers first: moving them mends the others' too.
    counts = np.bincount(triplets[broken].ravel(), minlength=len(y))[suspects]
    moved = 0
    for item in suspects[np.argsort(-counts, kind="stable")]:
        rows = rows_of[item]
        candidates = np.append(_gaps(np.delete(y, item)), y[item])
        cost = _broken_at(y, triplets[rows], item, candidates) @ weights[rows]
        best = int(np.argmin(cost))
        # A fold mends most of the item's broken answers; noise only shuffles a few.
        if cost[best] < MENDS * cost[-1]:
            y[item] = candidates[best]
            moved += 1
    return y[:, None], moved


def _broken(y: np.ndarray, triplets: np.ndarray) -> np.ndarray:
    a, b, c = (y[triplets[:, column]] for column in range(3))
    return np.abs(a - b) >= np.abs(a - c)


def _rows_by_item(triplets: np.ndarray, n: int) -> list[np.ndarray]:
    """For each item, the rows of the triplets it is in (once each)."""
    rows = np.repeat(np.arange(len(triplets)), 3)
    items = triplets.ravel()
    order = np.argsort(items, kind="stable")
    bounds = np.searchsorted(items[order], np.arange(n + 1))
    return [np.unique(rows[order[bounds[i] : bounds[i + 1]]]) for i in range(n)]


def _gaps(others: np.ndarray) -> np.ndarray:
    """Positions between neighbours on the line (GAPS at most) and beyond each end."""
    ordered = np.sort(others)
    if len(ordered) == 0:
        return np.zeros(1)
    middles = (ordered[:-1] + ordered[1:]) / 2
    if len(middles) > GAPS:
        middles = middles[np.linspace(0, len(middles) - 1, GAPS).round().astype(int)]
    step = (ordered[-1] - ordered[0]) / max(len(ordered), 2) or 1.0
    return np.concatenate([[ordered[0] - step], middles, [ordered[-1] + step]])


def _broken_at(y: np.ndarray, triplets: np.ndarray, item: int, at: np.ndarray) -> np.ndarray:
    """(candidates, triplets): whether each triplet is broken with `item` at each place."""
    where = np.broadcast_to(y[triplets], (len(at), *triplets.shape)).copy()
    mine = triplets == item
    where[:, mine] = at[:, None]
    a, b, c = where[..., 0], where[..., 1], where[..., 2]
    return (np.abs(a - b) >= np.abs(a - c)).astype(float)
