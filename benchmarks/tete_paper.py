"""t-ETE against t-STE (ours), the default (the loss chosen by cross-validation) and
cblearn's TSTE with wrong training answers, in one run, under both noise models.

As the t-ETE paper (Amid, Vlassis & Warmuth): triplets from features, each item against
its 10 nearest neighbours with 10 farther items each. Then 10 or 20% of the training
triplets are wrong, in two ways:
- uniform: reversed at random whatever the question (the paper's protocol);
- human: answered as people err, mostly on near ties (FeatureOracle's Bradley-Terry
  noise on the difference of the two distances, its scale set on these very questions
  so that 10 or 20% of them are answered wrongly).
Every method embeds in 2-D from the same triplets; reported: held-out triplet error
against clean triplets of the truth (a fresh sample), 1-NN error in the embedding (70/30
split of the labelled items), and fit seconds. Mean ± sd over seeds.

- planted: 1,000 points in the plane, 5 Gaussian clusters (the truth is 2-D);
- digits: scikit-learn's 1,797 8x8 digits, distances on the 64 pixel features.

    scripts/bench-peers
    .venv/bin/python benchmarks/tete_paper.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sklearn.datasets import load_digits, make_blobs
from sklearn.neighbors import KNeighborsClassifier

from app.learn import TETE, FeatureOracle, TETESearch, triplet_error
from app.learn.tete import feature_triplets

DATASETS = {
    "planted": lambda: make_blobs(n_samples=1000, centers=5, cluster_std=1.5, random_state=0),
    "digits": lambda: load_digits(return_X_y=True),
}
NOISES = (("none", 0.0), ("uniform", 0.1), ("uniform", 0.2), ("human", 0.1), ("human", 0.2))


def methods():
    from cblearn.embedding import TSTE

    return {
        "default (ours, auto)": lambda triplets, n, seed: TETESearch(
            TETE(random_state=seed), dimensions=None
        ).fit_transform(triplets, n),
        "t-ETE (ours, t=2)": lambda triplets, n, seed: TETE(t=2.0, random_state=seed).fit_transform(
            triplets, n
        ),
        "t-STE (ours, t=1)": lambda triplets, n, seed: TETE(t=1.0, random_state=seed).fit_transform(
            triplets, n
        ),
        "cblearn TSTE": lambda triplets, n, seed: TSTE(
            n_components=2, random_state=seed
        ).fit_transform(triplets, n_objects=n),
    }


def wrong_answers(X, train, model: str, rate: float, seed: int) -> np.ndarray:
    """The training triplets as a noisy crowd answers them (see the module's docstring)."""
    if model == "none":
        return train
    if model == "uniform":
        answered = train.copy()
        flip = np.random.default_rng(seed).random(len(train)) < rate
        answered[flip] = answered[flip][:, [0, 2, 1]]
        return answered
    scale = FeatureOracle(X).scale_for_error(rate, queries=train)
    return FeatureOracle(X, noise_scale=scale, random_state=seed).answer(train)


def one_nn_error(embedding, y, seed) -> float:
    order = np.random.default_rng(seed).permutation(len(y))
    train, test = order[: int(0.7 * len(y))], order[int(0.7 * len(y)) :]
    predicted = KNeighborsClassifier(1).fit(embedding[train], y[train]).predict(embedding[test])
    return float(np.mean(predicted != y[test]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    seeds = parser.parse_args().seeds
    fits = methods()
    TETE(max_iter=2).fit(np.array([[0, 1, 2], [1, 2, 0]]), 3)  # compile before timing
    print(f"\n2-D embeddings; mean ± sd over {seeds} seeds; errors in %")
    header = (
        f"{'data':<9}{'wrong':>13}  {'method':<20}{'held-out error':>16}"
        f"{'1-NN error':>14}{'seconds':>9}{'1-NN feat.':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, load in DATASETS.items():
        X, y = load()
        n = len(X)
        held_out, _ = feature_triplets(X, n_inliers=10, n_outliers=2, gamma=0, random_state=99)
        feature_nn = 100 * np.mean([one_nn_error(X, y, seed) for seed in range(seeds)])
        for model, rate in NOISES:
            rows = {label: [] for label in fits}
            for seed in range(seeds):
                questions, _ = feature_triplets(
                    X, n_inliers=10, n_outliers=10, gamma=0, random_state=seed
                )
                train = wrong_answers(X, questions, model, rate, seed)
                for label, fit in fits.items():
                    start = time.perf_counter()
                    embedding = fit(train, n, seed)
                    seconds = time.perf_counter() - start
                    rows[label].append(
                        (
                            100 * triplet_error(embedding, held_out),
                            100 * one_nn_error(embedding, y, seed),
                            seconds,
                        )
                    )
            for label, values in rows.items():
                values = np.array(values)
                mean, sd = values.mean(axis=0), values.std(axis=0)
                print(
                    f"{name:<9}{model:>8} {rate:>4.0%}  {label:<20}"
                    f"{mean[0]:>9.2f} ± {sd[0]:<4.2f}{mean[1]:>7.2f} ± {sd[1]:<4.2f}"
                    f"{mean[2]:>9.2f}{feature_nn:>11.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
