"""DisDF against the plain gcForest cascade (the same code, weights off) on small
training sets, as the DisDF paper's Tables 2–5.

scikit-learn's breast cancer, wine and digits; N = 50, 80, 100, 120 training items drawn
at random (stratified), the rest for testing; accuracy %, mean ± sd over repetitions,
and how often DisDF beat, tied or lost to gcForest on the same split. The paper's claim
to check: DisDF helps most at small N.

    .venv/bin/python benchmarks/disdf_paper.py [--reps 20] [--trees 100] [--tau 1 --lam 0.01]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.model_selection import train_test_split

from app.learn import DisDF

DATASETS = {"breast cancer": load_breast_cancer, "wine": load_wine, "digits": load_digits}
SIZES = (50, 80, 100, 120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--tau", type=float, default=1.0, help="DisDF's margin")
    parser.add_argument("--lam", type=float, default=0.01, help="DisDF's ridge")
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=list(DATASETS))
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    args = parser.parse_args()
    print(
        f"\nAccuracy %, mean ± sd over {args.reps} random splits; {args.trees} trees per forest;"
        f" DisDF tau={args.tau}, lam={args.lam}"
    )
    header = f"{'data':<15}{'N':>5}{'gcForest':>14}{'DisDF':>14}{'DisDF - gc':>12}{'won/tied/lost':>15}{'s':>6}"
    print(header)
    print("-" * len(header))
    for name in args.datasets:
        X, y = DATASETS[name](return_X_y=True)
        for size in args.sizes:
            start = time.perf_counter()
            scores = []
            for rep in range(args.reps):
                train, test = train_test_split(
                    np.arange(len(y)), train_size=size, stratify=y, random_state=rep
                )
                row = []
                for weighted in (False, True):
                    model = DisDF(
                        n_estimators=args.trees,
                        weighted=weighted,
                        tau=args.tau,
                        lam=args.lam,
                        random_state=rep,
                    )
                    model.fit(X[train], y[train])
                    row.append(100 * np.mean(model.predict(X[test]) == y[test]))
                scores.append(row)
            scores = np.array(scores)
            gain = scores[:, 1] - scores[:, 0]
            mean, sd = scores.mean(axis=0), scores.std(axis=0)
            record = f"{(gain > 0).sum()}/{(gain == 0).sum()}/{(gain < 0).sum()}"
            print(
                f"{name:<15}{size:>5}{mean[0]:>8.1f} ± {sd[0]:<3.1f}{mean[1]:>8.1f} ± {sd[1]:<3.1f}"
                f"{gain.mean():>+12.2f}{record:>15}{time.perf_counter() - start:>6.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
