"""Reproduce TripletBoost's experiments (Perrot & von Luxburg) on iris and moons.

Random triplets over all items (train and test) answered by a feature oracle with a
metric (euclidean, cosine, cityblock) and a noise rate (0, 10, 20%), at 1, 5 and 10% of
all triplets. TripletBoost learns from the triplets among training items and classifies
test items from their own triplets, by default (runs voting) and as one long run (the
paper's way, `--one-run-iter` rounds); the baselines, in the same run and on the same
triplets, embed every item with t-STE (ours; cblearn's with --cblearn, much slower) and
classify test items by 1-NN in the embedding; the comparison tree (CompTree: one
unsupervised comparison tree, leaves of 1) asks its own queries of the same noisy oracle;
1-NN on the features is the ceiling.
Accuracy %, mean ± sd over repetitions (random 70/30 splits).

    .venv/bin/python benchmarks/tripletboost_paper.py [--reps 10] [--cblearn] [--datasets moons]
        [--n-iter 20000 --n-runs 20] [--one-run-iter 100000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sklearn.datasets import load_iris, make_moons
from sklearn.neighbors import KNeighborsClassifier

from app.learn import TETE, CompRF, FeatureOracle, TripletBoost, random_triplets

DATASETS = {
    "iris": lambda: load_iris(return_X_y=True),
    "moons": lambda: make_moons(n_samples=300, noise=0.1, random_state=0),
}
METRICS = ("euclidean", "cosine", "cityblock")
SHARES = (0.01, 0.05, 0.1)
NOISES = (0.0, 0.1, 0.2)


def one_nn(train_X, train_y, test_X, metric="euclidean"):
    return KNeighborsClassifier(1, metric=metric).fit(train_X, train_y).predict(test_X)


def run(args) -> None:
    print(
        "\nAccuracy % (mean ± sd over",
        args.reps,
        f"random 70/30 splits); TripletBoost {args.n_runs} runs x {args.n_iter:,} rounds",
        f"voting, one run of {args.one_run_iter:,} rounds beside it; unsupported test items",
        "count as errors",
    )
    header = (
        f"{'data':<7}{'metric':<11}{'share':>6}{'noise':>6}{'triplets':>10}"
        f"{'TripletBoost':>15}{'unsup.':>7}{'one run':>14}{'t-STE+1NN':>14}{'CompTree':>14}"
        + (f"{'cblearn+1NN':>14}" if args.cblearn else "")
        + f"{'1NN feat.':>12}{'s':>6}"
    )
    print(header)
    print("-" * len(header))
    if args.cblearn:
        from cblearn.embedding import TSTE
    for name in args.datasets:
        load = DATASETS[name]
        X, y = load()  # raw features, as the paper (standardising iris hurts TripletBoost)
        n = len(X)
        for metric in METRICS:
            for share in SHARES:
                for noise in NOISES:
                    start = time.perf_counter()
                    rows = []
                    for rep in range(args.reps):
                        order = np.random.default_rng(rep).permutation(n)
                        train, test = order[: int(0.7 * n)], order[int(0.7 * n) :]
                        count = int(share * n * (n - 1) * (n - 2) / 2)
                        oracle = FeatureOracle(X, metric=metric, noise=noise, random_state=rep)
                        triplets = random_triplets(n, count, oracle, random_state=rep)
                        boost = TripletBoost(args.n_iter, rep, n_runs=args.n_runs)
                        predicted = boost.fit(triplets, train, y[train]).predict(triplets, test)
                        boost_accuracy = np.mean(predicted == y[test])
                        unsupported = np.mean([label is None for label in predicted])
                        one_run = TripletBoost(args.one_run_iter, rep, n_runs=1)
                        one_run.fit(triplets, train, y[train])
                        one_run_accuracy = np.mean(one_run.predict(triplets, test) == y[test])
                        embedding = TETE(t=1.0, random_state=rep).fit_transform(triplets, n)
                        ste = np.mean(
                            one_nn(embedding[train], y[train], embedding[test]) == y[test]
                        )
                        # The paper's comparison tree (Haghiri et al. 2017): one unsupervised
                        # comparison tree with leaves of 1, asking its own (noisy) queries.
                        tree = CompRF(1, leaf_size=1, supervised=False, random_state=rep)
                        tree.fit(train, y[train], oracle)
                        comp_tree = np.mean(tree.predict(test, oracle) == y[test])
                        row = [boost_accuracy, unsupported, one_run_accuracy, ste, comp_tree]
                        if args.cblearn:
                            peer = TSTE(n_components=2, random_state=rep).fit_transform(
                                triplets, n_objects=n
                            )
                            row.append(
                                np.mean(one_nn(peer[train], y[train], peer[test]) == y[test])
                            )
                        row.append(np.mean(one_nn(X[train], y[train], X[test], metric) == y[test]))
                        rows.append(row)
                    rows = 100 * np.array(rows)
                    mean, sd = rows.mean(axis=0), rows.std(axis=0)
                    cells = [
                        f"{mean[0]:>8.1f}±{sd[0]:<5.1f}",
                        f"{mean[1]:>6.1f}%",
                        f"{mean[2]:>8.1f}±{sd[2]:<5.1f}",
                        f"{mean[3]:>8.1f}±{sd[3]:<5.1f}",
                        f"{mean[4]:>8.1f}±{sd[4]:<5.1f}",
                    ]
                    if args.cblearn:
                        cells.append(f"{mean[5]:>8.1f}±{sd[5]:<5.1f}")
                    cells.append(f"{mean[-1]:>11.1f}")
                    print(
                        f"{name:<7}{metric:<11}{share:>6.0%}{noise:>6.0%}{count:>10,}"
                        + "".join(cells)
                        + f"{time.perf_counter() - start:>6.0f}",
                        flush=True,
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    defaults = TripletBoost()
    parser.add_argument("--n-iter", type=int, default=defaults.n_iter, help="rounds per run")
    parser.add_argument("--n-runs", type=int, default=defaults.n_runs, help="runs voting")
    parser.add_argument("--one-run-iter", type=int, default=100_000, help="the one run's rounds")
    parser.add_argument("--cblearn", action="store_true", help="also cblearn's TSTE (slow)")
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    run(parser.parse_args())


if __name__ == "__main__":
    main()
