"""Quality measures for embeddings learned from triplets."""

from __future__ import annotations

import numpy as np

from app.learn.triplets import check_triplets


def triplet_error(embedding, triplets) -> float:
    """Share of triplets ``(a, closer, farther)`` the embedding violates (ties count half)."""
    Y = np.asarray(embedding, dtype=np.float64)
    if Y.ndim != 2:
        raise ValueError(f"embedding must be 2-dimensional; got shape {Y.shape}")
    triplets = check_triplets(triplets, Y.shape[0])
    if len(triplets) == 0:
        raise ValueError("triplets is empty")
    a, p, q = triplets.T
    near = np.einsum("ij,ij->i", Y[a] - Y[p], Y[a] - Y[p])
    far = np.einsum("ij,ij->i", Y[a] - Y[q], Y[a] - Y[q])
    return float(np.mean((near > far) + 0.5 * (near == far)))
