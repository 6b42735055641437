"""The default embedding (t chosen by cross-validation) against fixed temperatures and
cblearn's embeddings, on the same answers, under both noise models (issue 16).

Planted data: 1,000 points in 5 Gaussian clusters in 5-D (so a 2-D map is an
approximation, as with people). Random questions are answered by FeatureOracle either
as people err (human: wrong mostly on near ties, Bradley-Terry on the difference of the
two distances, scaled so that 5, 10 or 20% of random questions are answered wrongly) or
with lapses (uniform: 10 or 20% of answers flipped whatever the question). Held-out
answers are fresh answers from the same noisy crowd, as a researcher's would be.

Every method embeds in 2-D from the same training answers; reported: held-out triplet
error, seconds, the default's distance to the best method of the row (target: never
more than +0.002), and cblearn TSTE's time over the default's (target: >= 5x at 100k).

    scripts/bench-peers
    .venv/bin/python benchmarks/embedding_choice.py [--triplets 100000] [--peers all]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sklearn.datasets import make_blobs

from app.learn import TETE, FeatureOracle, TETESearch, random_triplets, triplet_error

SETTINGS = (
    ("human", 0.05),
    ("human", 0.10),
    ("human", 0.20),
    ("uniform", 0.10),
    ("uniform", 0.20),
)


def crowd(X: np.ndarray, model: str, error: float, seed: int) -> FeatureOracle:
    if model == "uniform":
        return FeatureOracle(X, noise=error, random_state=seed)
    return FeatureOracle(X, noise_scale=FeatureOracle(X).scale_for_error(error), random_state=seed)


def methods(n: int, peers: str, seed: int, fitted: dict) -> dict:
    from cblearn.embedding import CKL, SOE, STE, TSTE

    def default(train):
        fitted["default"] = TETESearch(TETE(random_state=seed), dimensions=None).fit(train, n)
        return fitted["default"].embedding_

    ours = {
        "default (auto)": default,
        "ours t-STE (t=1)": lambda train: TETE(t=1.0, random_state=seed).fit_transform(train, n),
        "ours t-ETE (t=2)": lambda train: TETE(t=2.0, random_state=seed).fit_transform(train, n),
    }
    theirs = {
        "cblearn TSTE": lambda train: TSTE(n_components=2, random_state=seed).fit_transform(
            train, n_objects=n
        )
    }
    if peers == "all":
        theirs.update(
            {
                "cblearn STE": lambda train: STE(n_components=2, random_state=seed).fit_transform(
                    train, n_objects=n
                ),
                "cblearn CKL": lambda train: CKL(n_components=2, random_state=seed).fit_transform(
                    train, n_objects=n
                ),
                # One start instead of ten: ten take ten times as long for little gain here.
                "cblearn SOE (1 init)": lambda train: SOE(
                    n_components=2, n_init=1, random_state=seed
                ).fit_transform(train, n_objects=n),
            }
        )
    return {**ours, **theirs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--triplets", type=int, default=100_000)
    parser.add_argument("--heldout", type=int, default=20_000)
    parser.add_argument("--peers", choices=("tste", "all"), default="all")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    X, _ = make_blobs(
        n_samples=args.items, centers=5, n_features=5, cluster_std=2.0, random_state=0
    )
    TETE(t=1.0, max_iter=2).fit(np.array([[0, 1, 2]] * 30_000), 3)  # compile before timing
    print(
        f"{args.items:,} items, {args.triplets:,} training and {args.heldout:,} held-out "
        f"answers from the same crowd, 2-D, seed {args.seed}\n"
    )
    rows = []
    for model, error in SETTINGS:
        oracle = crowd(X, model, error, args.seed)
        train = random_triplets(args.items, args.triplets, oracle, random_state=args.seed)
        test = random_triplets(args.items, args.heldout, oracle, random_state=args.seed + 1)
        results, fitted = {}, {}
        for label, fit in methods(args.items, args.peers, args.seed, fitted).items():
            start = time.perf_counter()
            embedding = fit(train)
            results[label] = (triplet_error(embedding, test), time.perf_counter() - start)
            print(
                f"  {model} {error:.2f}  {label:<22} error {results[label][0]:.4f}  "
                f"{results[label][1]:6.1f} s",
                flush=True,
            )
        rows.append((model, error, results, fitted["default"].loss_))
    labels = list(rows[0][2])
    print()
    print(
        "| noise | wrong | "
        + " | ".join(labels)
        + " | default − best | chosen loss | TSTE s / default s |"
    )
    print("| --- | --- | " + " | ".join("---" for _ in labels) + " | --- | --- | --- |")
    for model, error, results, chosen in rows:
        best = min(value[0] for value in results.values())
        default_error, default_seconds = results["default (auto)"]
        cells = " | ".join(
            f"{results[label][0]:.4f} ({results[label][1]:.1f} s)" for label in labels
        )
        print(
            f"| {model} | {error:.2f} | {cells} | {default_error - best:+.4f} | {chosen} | "
            f"{results['cblearn TSTE'][1] / default_seconds:.1f}x |"
        )


if __name__ == "__main__":
    main()
