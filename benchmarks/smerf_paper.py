"""Reproduce SMERF's distance-learning simulations (§5.1) against a learnt Mahalanobis
distance, in one run.

20 features, of which only the first two drive the distance; n_train from 20 to 320,
200 test items, repetitions as given. The paper's formulas did not survive its text
copy; the settings follow its words, with every distance bounded in [0, 1]:

- regression: x ~ U(0, 1)^20, additive response r = (x1 + x2) / 2 + e, e ~ N(0, 0.05^2),
  clipped to [0, 1], distance (r_a - r_b)^2: up to the noise a (rank-one) Mahalanobis
  distance, the baseline's home ground;
- bilinear: the same response without the noise; similarity r_a r_b (bounded in [0, 1]), distance
  1 - r_a r_b (0 on the diagonal);
- radial: x uniform in the 20-dimensional unit ball, z its first two coordinates,
  distance (|z_a| - |z_b|)^2.

Measures on the test items (as the paper's Figure 1): mAP@10 (the 10 truly closest
items of each test item are the relevant ones, ranked by the learnt distance), the mean
Spearman correlation per test item between learnt and true distances to the others, and
the RMSE of the learnt distances. The baseline fits a squared Mahalanobis distance
``(x_a - x_b)' M (x_a - x_b)`` to the training distances by least squares and projects M
onto the positive semi-definite cone (a small ridge keeps it defined when there are
fewer pairs than its 210 unknowns). Also: the share of SMERF's feature importance on
the two relevant features, and how often they are its two largest.

    .venv/bin/python benchmarks/smerf_paper.py [--reps 10] [--trees 100] [--max-features sqrt]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from scipy.stats import spearmanr

from app.learn import SMERF

SIZES = (20, 40, 80, 160, 320)
N_TEST = 200
DIMENSIONS = 20


def response(X):
    return (X[:, 0] + X[:, 1]) / 2


def regression(n, rng):
    X = rng.uniform(0, 1, size=(n, DIMENSIONS))
    r = np.clip(response(X) + rng.normal(0, 0.05, size=n), 0, 1)
    return X, (r[:, None] - r[None, :]) ** 2


def bilinear(n, rng):
    X = rng.uniform(0, 1, size=(n, DIMENSIONS))
    r = response(X)
    D = 1 - np.outer(r, r)
    np.fill_diagonal(D, 0.0)  # an item is at distance 0 from itself
    return X, D


def radial(n, rng):
    direction = rng.normal(size=(n, DIMENSIONS))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    X = direction * rng.uniform(0, 1, size=(n, 1)) ** (1 / DIMENSIONS)
    norm = np.linalg.norm(X[:, :2], axis=1)
    return X, (norm[:, None] - norm[None, :]) ** 2


SETTINGS = {"regression": regression, "bilinear": bilinear, "radial": radial}


class Mahalanobis:
    """Least squares for M in D_ab ~ (x_a - x_b)' M (x_a - x_b), then M's PSD part."""

    def fit(self, X, D):
        first, second = np.triu_indices(len(X), 1)
        difference = X[first] - X[second]
        rows, columns = np.triu_indices(X.shape[1])
        scale = np.where(rows == columns, 1.0, 2.0)
        design = difference[:, rows] * difference[:, columns] * scale
        gram = design.T @ design
        ridge = 1e-6 * np.trace(gram) / len(gram)
        solution = np.linalg.solve(gram + ridge * np.eye(len(gram)), design.T @ D[first, second])
        M = np.zeros((X.shape[1], X.shape[1]))
        M[rows, columns] = solution
        M = (M + M.T) - np.diag(np.diag(M))
        values, vectors = np.linalg.eigh(M)
        self.M = (vectors * np.clip(values, 0, None)) @ vectors.T
        return self

    def predict(self, X):
        difference = X[:, None, :] - X[None, :, :]
        return np.einsum("abi,ij,abj->ab", difference, self.M, difference)


def measures(predicted, truth):
    n = len(truth)
    off = ~np.eye(n, dtype=bool)
    precision, correlation = [], []
    for i in range(n):
        others = np.flatnonzero(off[i])
        relevant = set(others[np.argsort(truth[i, others], kind="stable")[:10]])
        ranked = others[np.argsort(predicted[i, others], kind="stable")]
        hits, total = 0, 0.0
        for rank, item in enumerate(ranked, start=1):
            if item in relevant:
                hits += 1
                total += hits / rank
                if hits == len(relevant):
                    break
        precision.append(total / len(relevant))
        correlation.append(spearmanr(predicted[i, others], truth[i, others]).statistic)
    rmse = np.sqrt(np.mean((predicted[off] - truth[off]) ** 2))
    return np.mean(precision), np.nanmean(correlation), rmse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument(
        "--max-features",
        default="all",
        help="features tried per node: 'all' (default here: 2 of 20 features matter) or 'sqrt'",
    )
    args = parser.parse_args()
    max_features = None if args.max_features == "all" else args.max_features
    print(
        f"\nmean over {args.reps} repetitions; {N_TEST} test items; SMERF {args.trees} trees,"
        f" max_features={args.max_features}"
    )
    header = (
        f"{'setting':<12}{'n':>5}{'mAP@10 SMERF':>14}{'Mahal.':>8}{'Spearman SMERF':>16}"
        f"{'Mahal.':>8}{'RMSE SMERF':>12}{'Mahal.':>8}{'importance 1+2':>16}{'top 2':>7}{'s':>5}"
    )
    print(header)
    print("-" * len(header))
    for name, simulate in SETTINGS.items():
        for n in SIZES:
            start = time.perf_counter()
            rows = []
            for rep in range(args.reps):
                rng = np.random.default_rng(1000 * rep + n)
                X, D = simulate(n + N_TEST, rng)
                train, test = np.arange(n), np.arange(n, n + N_TEST)
                truth = D[np.ix_(test, test)]
                smerf = SMERF(args.trees, max_features=max_features, random_state=rep)
                smerf.fit(X[train], D[np.ix_(train, train)])
                ours = measures(smerf.predict(X[test]), truth)
                baseline = Mahalanobis().fit(X[train], D[np.ix_(train, train)])
                theirs = measures(baseline.predict(X[test]), truth)
                importance = smerf.feature_importances_
                top_two = set(np.argsort(importance)[-2:]) == {0, 1}
                rows.append(
                    [
                        ours[0],
                        theirs[0],
                        ours[1],
                        theirs[1],
                        ours[2],
                        theirs[2],
                        importance[:2].sum(),
                        top_two,
                    ]
                )
            mean = np.mean(rows, axis=0)
            print(
                f"{name:<12}{n:>5}{mean[0]:>14.3f}{mean[1]:>8.3f}{mean[2]:>16.3f}{mean[3]:>8.3f}"
                f"{mean[4]:>12.4f}{mean[5]:>8.4f}{mean[6]:>15.0%}{mean[7]:>8.0%}"
                f"{time.perf_counter() - start:>5.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
