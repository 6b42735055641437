"""Who answers "is a closer to p or to q?" when no person does: distances on features."""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from app.learn.triplets import check_triplets

METRICS = ("euclidean", "cosine", "cityblock", "precomputed")


class FeatureOracle:
    """Answers queries from item features (or a precomputed dissimilarity matrix).

    Parameters
    ----------
    X : array of shape (n_items, n_features), or (n_items, n_items) when
        ``metric="precomputed"`` (a dissimilarity, e.g. from a graph kernel).
    metric : "euclidean", "cosine", "cityblock" or "precomputed".
    noise : probability that an answer is flipped, to simulate a noisy crowd.
    random_state : seed of the flips.

    ``answer(queries)`` takes ``(m, 3)`` ``(anchor, p, q)`` and returns the triplets
    ``(anchor, closer, farther)``. Exact ties go to ``p``. ``n_answered_`` counts the
    queries answered so far.
    """

    def __init__(self, X, metric: str = "euclidean", noise: float = 0.0, random_state=None):
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be a probability in [0, 1]; got {noise}")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-dimensional; got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains NaN or infinite values")
        if metric == "precomputed" and X.shape[0] != X.shape[1]:
            raise ValueError(f"a precomputed X must be square; got shape {X.shape}")
        if metric == "cosine":
            norms = np.linalg.norm(X, axis=1, keepdims=True)
            if np.any(norms == 0):
                raise ValueError("cosine metric needs non-zero feature vectors")
            X = X / norms
        self.X = X
        self.metric = metric
        self.noise = noise
        self.random_state = random_state
        self._rng = check_random_state(random_state)
        self.n_answered_ = 0

    @property
    def n_items(self) -> int:
        return self.X.shape[0]

    def dissimilarity(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Dissimilarity of item pairs ``(a[i], b[i])`` (monotone in the metric)."""
        if self.metric == "precomputed":
            return self.X[a, b]
        diff = self.X[a] - self.X[b]
        if self.metric == "cityblock":
            return np.abs(diff).sum(axis=1)
        # Squared euclidean orders pairs like euclidean; on unit vectors so does cosine.
        return np.einsum("ij,ij->i", diff, diff)

    def answer(self, queries) -> np.ndarray:
        queries = check_triplets(queries, self.n_items, name="queries")
        if len(queries) == 0:
            return queries
        anchor, p, q = queries.T
        p_closer = self.dissimilarity(anchor, p) <= self.dissimilarity(anchor, q)
        if self.noise > 0:
            p_closer ^= self._rng.random_sample(len(queries)) < self.noise
        self.n_answered_ += len(queries)
        closer = np.where(p_closer, p, q)
        farther = np.where(p_closer, q, p)
        return np.stack([anchor, closer, farther], axis=1)
