"""Reproduce the CompRF paper's experiments (Haghiri, Garreau & von Luxburg, 2018) on
scikit-learn's bundled data sets, with the peers measured in the same run.

1. Euclidean setting (paper §4.1): supervised and unsupervised CompRF against
   scikit-learn's RandomForestClassifier and k-NN (k by 5-fold CV on the training set),
   10 random 80/20 splits, leaf_size in {1, 4, 16}, n_trees in {1, 16, 64, 256}. Forests of
   M trees are the first M trees of one 256-tree forest (trees are independent draws).
2. Comparison-based setting (paper §4.3): first two classes, half train, half test.
   CompRF (leaf_size 1) asks its own triplets; t-STE (cblearn's TSTE) embeds all items
   from exactly those triplets, or from as many random triplets, then k-NN classifies.
3. Regression (paper §4.2): CompRF (unsupervised) against RandomForestRegressor on
   diabetes, RMSE over 10 splits.

    scripts/bench-peers   # cblearn, for section 2
    .venv/bin/python benchmarks/comprf_paper.py [--splits 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sklearn.datasets import (
    load_breast_cancer,
    load_diabetes,
    load_digits,
    load_iris,
    load_wine,
)
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler

from app.learn import CompRF, FeatureOracle, random_triplets

TREES = (1, 16, 64, 256)
LEAVES = (1, 4, 16)
DATASETS = {
    "digits": load_digits,
    "iris": load_iris,
    "wine": load_wine,
    "breast cancer": load_breast_cancer,
}


def knn(train_X, train_y):
    search = GridSearchCV(KNeighborsClassifier(), {"n_neighbors": [1, 3, 5, 7, 9, 11]}, cv=5)
    return search.fit(train_X, train_y)


def forest_error_by_size(model, leaves, truth):
    return {m: np.mean(model.predict_from_leaves(leaves[:, :m]) != truth) for m in TREES}


def rf_error_by_size(forest, X, truth):
    votes = np.cumsum([tree.predict_proba(X) for tree in forest.estimators_], axis=0)
    return {m: np.mean(forest.classes_[votes[m - 1].argmax(axis=1)] != truth) for m in TREES}


def euclidean_setting(splits: int) -> None:
    print(
        "\n1. Euclidean setting: test error % (mean ± sd over "
        f"{splits} random 80/20 splits); features standardised"
    )
    header = f"{'data':<14}{'method':<26}" + "".join(f"{f'M={m}':>14}" for m in TREES)
    print(header)
    print("-" * len(header))
    for name, load in DATASETS.items():
        X, y = load(return_X_y=True)
        X = StandardScaler().fit_transform(X)
        oracle = FeatureOracle(X)
        errors: dict[str, list[dict[int, float]]] = {}
        knn_errors = []
        for split in range(splits):
            train, test = train_test_split(
                np.arange(len(X)), test_size=0.2, stratify=y, random_state=split
            )
            for supervised in (True, False):
                for leaf in LEAVES:
                    model = CompRF(
                        n_trees=max(TREES),
                        leaf_size=leaf,
                        supervised=supervised,
                        random_state=split,
                    ).fit(train, y[train], oracle)
                    leaves = model._leaves(test, oracle)
                    label = f"CompRF {'sup' if supervised else 'unsup'} leaf={leaf}"
                    errors.setdefault(label, []).append(
                        forest_error_by_size(model, leaves, y[test])
                    )
            rf = RandomForestClassifier(n_estimators=max(TREES), random_state=split, n_jobs=1)
            rf.fit(X[train], y[train])
            errors.setdefault("RandomForest (CART)", []).append(
                rf_error_by_size(rf, X[test], y[test])
            )
            knn_errors.append(np.mean(knn(X[train], y[train]).predict(X[test]) != y[test]))
        for label, runs in errors.items():
            cells = "".join(
                f"{100 * np.mean([r[m] for r in runs]):>8.2f}±{100 * np.std([r[m] for r in runs]):<5.2f}"
                for m in TREES
            )
            print(f"{name:<14}{label:<26}{cells}")
        print(
            f"{name:<14}{'k-NN (k by CV)':<26}{100 * np.mean(knn_errors):>8.2f}±"
            f"{100 * np.std(knn_errors):<5.2f}"
        )


def comparison_based_setting(splits: int) -> None:
    try:
        from cblearn.embedding import TSTE
    except ImportError:
        print("\n2. Comparison-based setting: skipped (scripts/bench-peers installs cblearn)")
        return
    print(
        "\n2. Comparison-based setting (first two classes, half train / half test): "
        "test error %, triplets used"
    )
    header = (
        f"{'data':<14}{'M':>4}{'triplets':>10}{'CompRF':>9}{'TSTE+kNN same':>15}"
        f"{'TSTE+kNN random':>17}{'CompRF s':>10}{'TSTE s':>8}"
    )
    print(header)
    print("-" * len(header))
    for name in ("digits", "breast cancer"):
        X, y = DATASETS[name](return_X_y=True)
        keep = np.isin(y, np.unique(y)[:2])
        X, y = StandardScaler().fit_transform(X[keep]), y[keep]
        for m in (1, 4, 16):
            rows = []
            for split in range(splits):
                train, test = train_test_split(
                    np.arange(len(X)), test_size=0.5, stratify=y, random_state=split
                )
                oracle = FeatureOracle(X)
                start = time.perf_counter()
                model = CompRF(n_trees=m, random_state=split).fit(train, y[train], oracle)
                router = model.route(test)
                while not router.is_complete:
                    router.add_answers(oracle.answer(router.pending_queries()))
                comprf_error = np.mean(model.predict_from_leaves(router.leaves()) != y[test])
                comprf_seconds = time.perf_counter() - start
                # Every triplet CompRF saw: its build answers and its routing answers.
                same = np.concatenate([model.store_.triplets(), router.store.triplets()])
                randoms = random_triplets(len(X), len(same), oracle, random_state=split)
                start = time.perf_counter()
                errors = []
                for triplets in (same, randoms):
                    embedding = TSTE(n_components=10, random_state=split).fit_transform(
                        triplets, n_objects=len(X)
                    )
                    classifier = knn(embedding[train], y[train])
                    errors.append(np.mean(classifier.predict(embedding[test]) != y[test]))
                rows.append(
                    (
                        len(same),
                        comprf_error,
                        *errors,
                        comprf_seconds,
                        (time.perf_counter() - start) / 2,
                    )
                )
            rows = np.array(rows)
            mean = rows.mean(axis=0)
            print(
                f"{name:<14}{m:>4}{int(mean[0]):>10,}{100 * mean[1]:>9.2f}{100 * mean[2]:>15.2f}"
                f"{100 * mean[3]:>17.2f}{mean[4]:>10.2f}{mean[5]:>8.2f}"
            )


def regression(splits: int) -> None:
    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    oracle = FeatureOracle(X)
    print(
        f"\n3. Regression on diabetes: test RMSE (mean ± sd over {splits} 80/20 splits), 256 trees"
    )
    results: dict[str, list[float]] = {}
    for split in range(splits):
        train, test = train_test_split(np.arange(len(X)), test_size=0.2, random_state=split)
        for leaf in LEAVES:
            model = CompRF(n_trees=256, leaf_size=leaf, task="regression", random_state=split)
            predicted = model.fit(train, y[train], oracle).predict(test, oracle)
            results.setdefault(f"CompRF leaf={leaf}", []).append(
                np.sqrt(np.mean((predicted - y[test]) ** 2))
            )
        for leaf in (1, 5):
            rf = RandomForestRegressor(
                n_estimators=256, min_samples_leaf=leaf, random_state=split, n_jobs=1
            ).fit(X[train], y[train])
            results.setdefault(f"RandomForestRegressor leaf={leaf}", []).append(
                np.sqrt(np.mean((rf.predict(X[test]) - y[test]) ** 2))
            )
    for label, values in results.items():
        print(f"{label:<34}{np.mean(values):>8.2f} ± {np.std(values):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--only", choices=("euclidean", "comparison", "regression"))
    args = parser.parse_args()
    start = time.perf_counter()
    if args.only in (None, "euclidean"):
        euclidean_setting(args.splits)
    if args.only in (None, "comparison"):
        comparison_based_setting(args.splits)
    if args.only in (None, "regression"):
        regression(args.splits)
    print(f"\n({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
