"""DisDF speed against scikit-learn's random forest, in one run.

A 3-level cascade (2 random + 2 completely-random forests of 100 trees per level, 3-fold
cross-fitting, tree weights by Frank–Wolfe) on 1,000 digits x 64 features; target under
60 s. The same cascade with the weights off (gcForest) and one
`RandomForestClassifier` of 100 trees on the same data, one core each.

    .venv/bin/python benchmarks/disdf_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier

from app.learn import DisDF


def main() -> None:
    X, y = load_digits(return_X_y=True)
    train, test = np.arange(1000), np.arange(1000, len(y))
    print("\n1,000 digits x 64 features, one core; accuracy on the other 797")
    print(f"{'model':<44}{'fit s':>8}{'accuracy %':>12}{'vs forest':>11}")
    rows = []
    start = time.perf_counter()
    forest = RandomForestClassifier(100, random_state=0).fit(X[train], y[train])
    forest_s = time.perf_counter() - start
    rows.append(("RandomForestClassifier, 100 trees", forest_s, forest.predict(X[test])))
    for label, weighted in (
        ("DisDF, 3 levels", True),
        ("gcForest (same cascade, weights off)", False),
    ):
        model = DisDF(max_levels=3, early_stopping=False, weighted=weighted, random_state=0)
        start = time.perf_counter()
        model.fit(X[train], y[train])
        rows.append((label, time.perf_counter() - start, model.predict(X[test])))
    for label, seconds, predicted in rows:
        accuracy = 100 * np.mean(predicted == y[test])
        print(f"{label:<44}{seconds:>8.2f}{accuracy:>12.1f}{seconds / forest_s:>10.1f}x")


if __name__ == "__main__":
    main()
