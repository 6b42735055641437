"""CompRF speed: build 100 trees on 5,000 items with a feature oracle, and route 1,000 items.

The oracle's own time is measured apart, so the table shows CompRF's bookkeeping alone
(the target: under 2 s for the build on one core; under 1 s to predict 1,000 items
through 100 trees). scikit-learn's RandomForestClassifier on the same features, in the
same run and on one core, is the peer for scale.

    .venv/bin/python benchmarks/comprf_speed.py [--items 5000] [--trees 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

from app.learn.comprf import CompRF
from app.learn.oracles import FeatureOracle


class TimedOracle(FeatureOracle):
    """A feature oracle that keeps the time spent answering."""

    seconds = 0.0
    calls = 0

    def answer(self, queries):
        start = time.perf_counter()
        try:
            return super().answer(queries)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--predict", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.items + args.predict
    X, y = make_classification(
        n_samples=n, n_features=20, n_informative=10, n_classes=5, random_state=0
    )
    train, test = np.arange(args.items), np.arange(args.items, n)
    CompRF(n_trees=2, random_state=0).fit(train[:200], y[:200], FeatureOracle(X))  # warm-up

    builds, routings = [], []
    for _ in range(args.repeats):
        oracle = TimedOracle(X)
        start = time.perf_counter()
        model = CompRF(n_trees=args.trees, random_state=0).fit(train, y[train], oracle)
        builds.append((time.perf_counter() - start, oracle.seconds))
        build_rounds = oracle.calls

        oracle = TimedOracle(X)
        start = time.perf_counter()
        accuracy = np.mean(model.predict(test, oracle) == y[test])
        routings.append((time.perf_counter() - start, oracle.seconds))

    start = time.perf_counter()
    peer = RandomForestClassifier(n_estimators=args.trees, n_jobs=1, random_state=0)
    peer.fit(X[train], y[train])
    peer_fit = time.perf_counter() - start
    start = time.perf_counter()
    peer_accuracy = np.mean(peer.predict(X[test]) == y[test])
    peer_predict = time.perf_counter() - start

    expected = args.items * np.log2(args.items)
    print(
        f"\nCompRF, {args.trees} trees, leaf_size 1, {args.items:,} items x 20 features "
        f"(5 classes), one core; median of {args.repeats} runs [min-max of CompRF's own time]"
    )
    print(
        f"{'phase':<24}{'total s':>9}{'oracle s':>10}{'CompRF s':>10}{'range':>14}{'queries':>12}"
        f"{'peer s':>8}{'CompRF/peer':>13}"
    )
    print("-" * 100)
    for label, runs, peer_seconds, queries in (
        ("build", builds, peer_fit, f"{model.n_queries_:,}"),
        (f"predict {args.predict:,} items", routings, peer_predict, ""),
    ):
        runs = np.array(runs)
        own = runs[:, 0] - runs[:, 1]
        total, oracle_seconds, median = np.median(runs[:, 0]), np.median(runs[:, 1]), np.median(own)
        spread = f"[{own.min():.2f}-{own.max():.2f}]"
        print(
            f"{label:<24}{total:>9.2f}{oracle_seconds:>10.2f}{median:>10.2f}{spread:>14}"
            f"{queries:>12}{peer_seconds:>8.2f}{median / peer_seconds:>13.2f}"
        )
    print(
        f"\nqueries per tree {model.n_queries_ / args.trees:,.0f} vs n*log2(n) = {expected:,.0f}; "
        f"{build_rounds} oracle rounds; accuracy CompRF {accuracy:.3f}, "
        f"RandomForestClassifier {peer_accuracy:.3f}"
    )
    print("Targets: build bookkeeping < 2 s; predict 1,000 items through 100 trees < 1 s.")


if __name__ == "__main__":
    main()
