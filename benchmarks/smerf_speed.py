"""SMERF speed against scikit-learn's random forests, in one run.

1,000 items x 50 features; the dissimilarity comes from the first two features (labels
for the classifier comparison, a numeric target for the regressor's). 100 trees, one core
each, default feature sampling (sqrt of the features per node). Target: SMERF's fit under
30 s. Also the forest distances among 1,000 new items.

    .venv/bin/python benchmarks/smerf_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

from app.learn import SMERF, dissimilarity_from_labels, dissimilarity_from_target


def timed(fit) -> float:
    start = time.perf_counter()
    fit()
    return time.perf_counter() - start


def main() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 50))
    target = np.sin(2 * X[:, 0]) + X[:, 1] ** 2
    labels = np.digitize(target, np.quantile(target, [0.25, 0.5, 0.75]))
    SMERF(2, random_state=0).fit(X[:50], dissimilarity_from_labels(labels[:50]))  # compile
    print("\n100 trees on 1,000 items x 50 features, one core")
    print(f"{'dissimilarity':<34}{'SMERF s':>9}{'scikit-learn s':>16}{'ratio':>7}")
    for name, D, peer in (
        (
            "labels (vs RandomForestClassifier)",
            dissimilarity_from_labels(labels),
            lambda: RandomForestClassifier(100, max_features="sqrt", random_state=0).fit(X, labels),
        ),
        (
            "target (vs RandomForestRegressor)",
            dissimilarity_from_target(target),
            lambda: RandomForestRegressor(100, max_features="sqrt", random_state=0).fit(X, target),
        ),
    ):
        model = SMERF(100, random_state=0)
        ours = timed(lambda model=model, D=D: model.fit(X, D))
        theirs = timed(peer)
        print(f"{name:<34}{ours:>9.2f}{theirs:>16.2f}{ours / theirs:>6.1f}x")
    new = rng.normal(size=(1000, 50))
    print(
        f"\ndistances among 1,000 new items (1,000 x 1,000): {timed(lambda: model.predict(new)):.2f} s"
    )


if __name__ == "__main__":
    main()
