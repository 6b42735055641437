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
    noise : probability that an answer is flipped whatever the question, to simulate a
        crowd's lapses (uniform flips).
    noise_scale : human-like noise (0: none). People err on near ties: the answer is
        ``p`` with probability ``1 / (1 + exp(-(d(a, q) - d(a, p)) / noise_scale))``
        (Bradley-Terry on the difference of the two distances), so a question whose two
        distances are close is nearly a coin toss and a clear one is answered right.
        ``noise_scale`` is in the metric's units (see ``scale_for_error``). Both kinds
        may be combined: the lapses flip the human-like answer.
    random_state : seed of the noise.

    ``answer(queries)`` takes ``(m, 3)`` ``(anchor, p, q)`` and returns the triplets
    ``(anchor, closer, farther)``. Exact ties go to ``p`` without human-like noise.
    ``rank(reference, shown, picks)`` and ``odd_one_out(shown)`` answer a screen of
    several items, with the same noise applied to each decision on it.
    ``n_answered_`` counts the queries (and screens) answered so far.
    """

    def __init__(
        self,
        X,
        metric: str = "euclidean",
        noise: float = 0.0,
        random_state=None,
        noise_scale: float = 0.0,
    ):
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be a probability in [0, 1]; got {noise}")
        if not (np.isfinite(noise_scale) and noise_scale >= 0):
            raise ValueError(f"noise_scale must be a distance >= 0; got {noise_scale}")
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
        self.noise_scale = float(noise_scale)
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

    def distance(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The metric itself between item pairs (what human-like noise is scaled by)."""
        found = self.dissimilarity(a, b)
        if self.metric in ("euclidean", "cosine"):
            return np.sqrt(found)
        return found

    def scale_for_error(self, error: float, n_samples: int = 20_000, queries=None) -> float:
        """The ``noise_scale`` at which random questions are answered wrongly at rate
        `error` (for instance 0.1), measured on a seeded sample of random triplets, or on
        the given `queries` (questions chosen otherwise, say near neighbours against
        farther items, are harder or easier than random ones)."""
        if not 0.0 < error < 0.5:
            raise ValueError(f"error must be in (0, 0.5); got {error}")
        if queries is not None:
            sample = check_triplets(queries, self.n_items, name="queries")
            if len(sample) == 0:
                raise ValueError("queries is empty")
        else:
            rng = np.random.default_rng(0)
            sample = rng.integers(0, self.n_items, (n_samples, 3))
            sample = sample[(sample[:, 0] != sample[:, 1]) & (sample[:, 0] != sample[:, 2])]
            sample = sample[sample[:, 1] != sample[:, 2]]
        margin = np.abs(
            self.distance(sample[:, 0], sample[:, 2]) - self.distance(sample[:, 0], sample[:, 1])
        )

        def wrong(scale: float) -> float:
            with np.errstate(over="ignore"):
                return float(np.mean(1.0 / (1.0 + np.exp(margin / scale))))

        low, high = 1e-12, float(margin.max() + 1e-12) * 100
        for _ in range(100):  # the error rate grows with the scale: bisect
            middle = (low + high) / 2
            low, high = (middle, high) if wrong(middle) < error else (low, middle)
        return (low + high) / 2

    def answer(self, queries) -> np.ndarray:
        queries = check_triplets(queries, self.n_items, name="queries")
        if len(queries) == 0:
            return queries
        anchor, p, q = queries.T
        if self.noise_scale > 0:
            margin = self.distance(anchor, q) - self.distance(anchor, p)
            with np.errstate(over="ignore"):
                chance_p = 1.0 / (1.0 + np.exp(-margin / self.noise_scale))
            p_closer = self._rng.random_sample(len(queries)) < chance_p
        else:
            p_closer = self.dissimilarity(anchor, p) <= self.dissimilarity(anchor, q)
        if self.noise > 0:
            p_closer ^= self._rng.random_sample(len(queries)) < self.noise
        self.n_answered_ += len(queries)
        closer = np.where(p_closer, p, q)
        farther = np.where(p_closer, q, p)
        return np.stack([anchor, closer, farther], axis=1)

    def _one_of(self, costs: np.ndarray) -> int:
        """Which of several options a person takes, the least costly most often: with
        human-like noise a softmax over ``-cost / noise_scale`` (for two options the
        triplet's Bradley-Terry answer), else the least costly; a lapse (``noise``)
        takes any at random."""
        if self.noise > 0 and self._rng.random_sample() < self.noise:
            return int(self._rng.randint(len(costs)))
        if self.noise_scale > 0:
            weights = np.exp(-(costs - costs.min()) / self.noise_scale)
            return int(self._rng.choice(len(costs), p=weights / weights.sum()))
        return int(np.argmin(costs))

    def rank(self, reference: int, shown, picks: int) -> np.ndarray:
        """Answer "pick the `picks` of `shown` most like `reference`, most alike first":
        each pick made in turn among the items left, the nearer the likelier (see
        ``answer`` for the noise). Returns the picked items in order."""
        left = np.asarray(shown, dtype=np.int64)
        if not 1 <= picks < len(left):
            raise ValueError(f"picks must be at least 1 and fewer than {len(left)}; got {picks}")
        costs = self.distance(np.full(len(left), reference), left)
        picked = []
        for _ in range(picks):
            at = self._one_of(costs)
            picked.append(int(left[at]))
            left, costs = np.delete(left, at), np.delete(costs, at)
        self.n_answered_ += 1
        return np.array(picked, dtype=np.int64)

    def odd_one_out(self, shown) -> int:
        """Answer "which of these three is least like the other two?": the pair most
        alike is kept together (the nearer pair the likelier, see ``answer`` for the
        noise), and the third item is the odd one."""
        a, b, c = np.asarray(shown, dtype=np.int64)
        pairs = self.distance(np.array([b, a, a]), np.array([c, c, b]))  # without a, b, c
        self.n_answered_ += 1
        return int((a, b, c)[self._one_of(pairs)])
