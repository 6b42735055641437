"""t-ETE / t-STE speed and memory against cblearn's TSTE, in one run.

- One loss-and-gradient pass over 1,000,000 triplets in 2-D (target < 50 ms).
- A fit on 1,000 items and 100,000 triplets in 2-D (a near neighbour against a farther
  item, as in the t-ETE paper), answered without errors, with 10% reversed at random
  (uniform) and with 10% wrong as people err, on near ties (human): held-out triplet
  error (against the truth) and seconds: ours (t-STE at t=1, t-ETE at t=2, the default
  that chooses the loss by cross-validation) against cblearn's TSTE (target: t-STE 10x
  faster at equal or lower held-out error).
- Peak memory of a fit on 10,000,000 triplets (a few steps; target < 2 GB).

    scripts/bench-peers
    .venv/bin/python benchmarks/tete_speed.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from app.learn import FeatureOracle, random_triplets, triplet_error  # noqa: E402
from app.learn._tete_loss import loss_and_gradient  # noqa: E402
from app.learn.tete import TETE, feature_triplets  # noqa: E402
from app.learn.tete_search import TETESearch  # noqa: E402

MEMORY_PROBE = """
import sys
sys.path.insert(0, {repo!r})
from benchmarks._memory import peak_rss_mib
import numpy as np
from app.learn.tete import TETE
from app.learn.tete_search import TETESearch
rng = np.random.default_rng(0)
n = 100_000
triplets = rng.integers(0, n, size=(12_000_000, 3))
keep = (triplets[:, 0] != triplets[:, 1]) & (triplets[:, 0] != triplets[:, 2]) & (triplets[:, 1] != triplets[:, 2])
triplets = np.ascontiguousarray(triplets[keep][:10_000_000])
TETESearch(TETE(max_iter=3, random_state=0), dimensions=None).fit(triplets, n)
print(peak_rss_mib())
"""


def gradient_pass_ms() -> float:
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(1000, 2))
    triplets = random_triplets(1000, 1_000_000, FeatureOracle(Y), random_state=0)
    weights, movable, gradient = np.ones(len(triplets)), np.ones(1000, bool), np.zeros_like(Y)
    loss_and_gradient(Y, triplets, weights, 2.0, 2.0, gradient, movable)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        loss_and_gradient(Y, triplets, weights, 2.0, 2.0, gradient, movable)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def _compare(train, test, seeds: int, TSTE) -> None:
    methods = {
        "cblearn TSTE (L-BFGS)": lambda seed: TSTE(n_components=2, random_state=seed).fit_transform(
            train, n_objects=1000
        ),
        "ours t-STE (t=1, authors' descent)": lambda seed: TETE(
            t=1.0, random_state=seed
        ).fit_transform(train, 1000),
        "ours t-STE (t=1, L-BFGS)": lambda seed: TETE(
            t=1.0, optimizer="lbfgs", random_state=seed
        ).fit_transform(train, 1000),
        "ours t-ETE (t=2)": lambda seed: TETE(t=2.0, random_state=seed).fit_transform(train, 1000),
        "ours default (loss chosen, auto)": lambda seed: TETESearch(
            TETE(random_state=seed), dimensions=None
        ).fit_transform(train, 1000),
    }
    results = {}
    for label, fit in methods.items():
        errors, seconds = [], []
        for seed in range(seeds):
            start = time.perf_counter()
            embedding = fit(seed)
            seconds.append(time.perf_counter() - start)
            errors.append(triplet_error(embedding, test))
        results[label] = (np.array(errors), np.mean(seconds))
    peer_seconds = results["cblearn TSTE (L-BFGS)"][1]
    for label, (errors, seconds) in results.items():
        print(
            f"{label:<40}{100 * errors.mean():>13.2f} ± {100 * errors.std():<4.2f}{seconds:>10.2f}"
            f"{peer_seconds / seconds:>16.1f}",
            flush=True,
        )


def main() -> None:
    import argparse

    from cblearn.embedding import TSTE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    seeds = parser.parse_args().seeds

    print(
        f"\none loss+gradient pass, 1,000,000 triplets, 2-D: {gradient_pass_ms():.1f} ms "
        "(target < 50 ms)"
    )
    rng = np.random.default_rng(0)
    truth = rng.normal(size=(1000, 2))
    questions, _ = feature_triplets(truth, n_inliers=10, n_outliers=10, gamma=0, random_state=0)
    test, _ = feature_triplets(truth, n_inliers=10, n_outliers=2, gamma=0, random_state=1)
    TETE(max_iter=2).fit(questions[:100], 1000)  # compile before timing
    human_scale = FeatureOracle(truth).scale_for_error(0.1, queries=questions)
    crowds = {
        "no errors": FeatureOracle(truth),
        "uniform 10%": FeatureOracle(truth, noise=0.1, random_state=0),
        "human 10%": FeatureOracle(truth, noise_scale=human_scale, random_state=0),
    }
    print(
        f"\nfit: 1,000 items, {len(questions):,} training and {len(test):,} held-out "
        f"triplets, 2-D; mean ± sd over {seeds} seeds"
    )
    for crowd, oracle in crowds.items():
        train = oracle.answer(questions)
        print(f"\n{crowd}")
        print(f"{'method':<40}{'held-out error %':>20}{'seconds':>10}{'cblearn / ours':>16}")
        _compare(train, test, seeds, TSTE)
    peak = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE.format(repo=str(REPO))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(
        f"\npeak memory fitting 10,000,000 triplets (100,000 items, 3 steps): "
        f"{float(peak):,.0f} MiB (target < 2,048 MiB)"
    )


if __name__ == "__main__":
    main()
