"""TripletBoost speed and memory at the issue's size, with peers in the same run.

- Fit on moons, 1,000 points, 10% of all triplets (49,850,100) with 10% noise, as in
  the paper's Figure 3c: indexing the answers, then 10^6 boosting rounds in one run
  (target < 10 s; the authors report about 0.56 ms per round, ~9 minutes), and the
  default's runs voting (20 x 20,000 rounds) on the same index. Peer: the same rounds written
  as a straightforward vectorised-numpy loop over the same index, timed on a few
  thousand rounds and extrapolated to 10^6.
- Prediction for 1,000 new items from their own triplets (target < 0.5 s), at 1,000
  answers per item and at the paper's 10% share (~50,000 answers per item).
- Training time against cblearn's TSTE (embedding + 1-NN, the paper's baseline) on
  moons of growing size at 10% of triplets, as the paper's Figure 3c.
- Peak memory of a fit on 10^6 and 10^7 triplets, among 1,000 and 100,000 items
  (target: linear, 10^7 under 2 GB).

    scripts/bench-peers
    .venv/bin/python benchmarks/tripletboost_speed.py [--skip-cblearn]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from sklearn.datasets import make_moons  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402

from app.learn import TETE, FeatureOracle, TripletBoost, random_triplets  # noqa: E402

MEMORY_PROBE = """
import sys
sys.path.insert(0, {repo!r})
from benchmarks._memory import current_rss_mib, peak_rss_mib, reset_peak
import numpy as np
from app.learn import TripletBoost
rng = np.random.default_rng(0)
n, m = {n}, {m}
triplets = rng.integers(0, n, size=(m + m // 10, 3))
keep = (triplets[:, 0] != triplets[:, 1]) & (triplets[:, 0] != triplets[:, 2])
keep &= triplets[:, 1] != triplets[:, 2]
triplets = np.ascontiguousarray(triplets[keep][:m])
reset_peak()
before = current_rss_mib()
TripletBoost(random_state=0).fit(triplets, np.arange(n), np.arange(n) % 2)
after = peak_rss_mib()
print(before, after)
"""


def all_triplets(n: int) -> int:
    return n * (n - 1) * (n - 2) // 2


def numpy_rounds(model: TripletBoost, n_rounds: int, seed: int = 0) -> float:
    """Seconds for `n_rounds` of the same boosting rounds written with numpy per round."""
    pair_keys, offsets, anchors, lower_votes, votes = model._answers
    labels = model._labels
    n, n_classes = model._weights.shape[1:]
    weights = np.full((n, n_classes), 1.0 / (n * n_classes))
    rng = np.random.default_rng(seed)
    truth = np.arange(n_classes) == labels[:, None]
    start = time.perf_counter()
    for _ in range(n_rounds):
        marginal = weights.sum(axis=1)
        j = rng.choice(n, p=marginal / marginal.sum())
        other = marginal * (labels != labels[j])
        k = rng.choice(n, p=other / other.sum())
        lower, higher = min(j, k), max(j, k)
        slot = np.searchsorted(pair_keys, lower * n + higher)
        if slot == len(pair_keys) or pair_keys[slot] != lower * n + higher:
            continue
        span = slice(offsets[slot], offsets[slot + 1])
        decided = 2 * lower_votes[span] != votes[span]
        items = anchors[span][decided]
        to_j = ((2 * lower_votes[span] > votes[span]) == (lower == j))[decided]
        signed = np.where(truth[items], weights[items], -weights[items])
        mask_j = signed[to_j].sum(axis=0) > 0
        mask_k = signed[~to_j].sum(axis=0) > 0
        inside = np.where(to_j[:, None], mask_j, mask_k)
        agree = inside == truth[items]
        total = weights.sum()
        plus, minus = weights[items][agree].sum() / total, weights[items][~agree].sum() / total
        alpha = 0.5 * np.log((plus + 1 / n) / (minus + 1 / n))
        weights[items] *= np.where(agree, np.exp(-alpha), np.exp(alpha))
    return time.perf_counter() - start


def issue_size(args) -> None:
    n = 1000
    X, y = make_moons(n_samples=2 * n, noise=0.1, random_state=0)
    count = all_triplets(n) // 10
    triplets = random_triplets(
        n, count, FeatureOracle(X[:n], noise=0.1, random_state=0), random_state=0
    )
    TripletBoost(n_iter=10, random_state=0).fit(triplets[:1000], np.arange(n), y[:n])  # compile
    model = TripletBoost(n_iter=1, n_runs=1, random_state=0)
    start = time.perf_counter()
    model.fit(triplets, np.arange(n), y[:n])
    index_s = time.perf_counter() - start
    start = time.perf_counter()
    model.partial_fit(np.empty((0, 3), np.int64), n_iter=1_000_000)
    rounds_s = time.perf_counter() - start
    voting = TripletBoost(n_iter=1, random_state=0).fit(triplets[:1000], np.arange(n), y[:n])
    voting._answers = model._answers  # the same index: the runs alone are timed
    start = time.perf_counter()
    voting.partial_fit(np.empty((0, 3), np.int64), n_iter=TripletBoost().n_iter)
    voting_s = time.perf_counter() - start
    peer_rounds = 2000
    peer_s = numpy_rounds(model, peer_rounds) * 1_000_000 / peer_rounds
    print(f"\nFit on moons, {n:,} points, {count:,} triplets (10%), 10% noise")
    print(f"{'step':<44}{'ours s':>10}{'peer s':>12}{'ratio':>8}")
    print(f"{'index the answers (majority per query, CSR)':<44}{index_s:>10.2f}")
    print(
        f"{'10^6 boosting rounds':<44}{rounds_s:>10.2f}{peer_s:>12.0f}"
        f"{peer_s / rounds_s:>7.0f}x   (peer: numpy per round, {peer_rounds:,} rounds extrapolated)"
    )
    print(f"{'the default: 20 runs x 20,000 rounds voting':<44}{voting_s:>10.2f}")
    print(
        f"{'fit, all included':<44}{index_s + rounds_s:>10.2f}{560:>12.0f}"
        f"{560 / (index_s + rounds_s):>7.0f}x   (peer: the authors' 0.56 ms/round, quoted)"
    )
    del triplets

    rng = np.random.default_rng(1)
    new = np.arange(n, 2 * n)
    print(f"\nPrediction for {n:,} new moons points from their own triplets (10% noise)")
    print(
        f"{'answers per item':>18}{'triplets':>12}{'seconds':>10}{'accuracy %':>12}{'unsupported':>13}"
    )
    for per_item in (1000, n * (n - 1) // 20):
        anchors = np.repeat(new, per_item)
        p = rng.integers(0, n, size=len(anchors))
        q = rng.integers(0, n - 1, size=len(anchors))
        q += q >= p
        oracle = FeatureOracle(X, noise=0.1, random_state=1)
        asked = oracle.answer(np.stack([anchors, p, q], axis=1))
        asked = asked[rng.permutation(len(asked))]  # answers arrive in no particular order
        times = []
        for _ in range(3):
            start = time.perf_counter()
            predicted = model.predict(asked, new)
            times.append(time.perf_counter() - start)
        accuracy = 100 * np.mean(predicted == y[n:])
        unsupported = np.mean([label is None for label in predicted])
        print(
            f"{per_item:>18,}{len(asked):>12,}{min(times):>10.3f}{accuracy:>12.1f}{unsupported:>12.0%}"
        )
        del asked, anchors, p, q


def against_embedding(args) -> None:
    """The paper's Figure 3c: training time as the sample grows, 10% triplets/noise."""
    print("\nTraining time on moons, 10% of triplets, 10% noise (paper's Figure 3c); 30% held out")
    header = f"{'n':>6}{'triplets':>12}{'TripletBoost s':>16}{'acc %':>7}{'t-STE s':>9}{'acc %':>7}"
    if not args.skip_cblearn:
        from cblearn.embedding import TSTE

        header += f"{'cblearn TSTE s':>16}{'acc %':>7}"
    print(header)
    for n in (100, 200, 400) if not args.skip_cblearn else (100, 200, 400, 1000):
        X, y = make_moons(n_samples=n, noise=0.1, random_state=0)
        triplets = random_triplets(
            n, all_triplets(n) // 10, FeatureOracle(X, noise=0.1, random_state=0), random_state=0
        )
        order = np.random.default_rng(0).permutation(n)
        train, test = order[: int(0.7 * n)], order[int(0.7 * n) :]
        start = time.perf_counter()
        # 10^6 rounds in all, as the paper: 20 runs of 50,000 voting
        boost = TripletBoost(n_iter=50_000, random_state=0).fit(triplets, train, y[train])
        boost_s = time.perf_counter() - start
        boost_acc = 100 * np.mean(boost.predict(triplets, test) == y[test])
        row = f"{n:>6}{len(triplets):>12,}{boost_s:>16.2f}{boost_acc:>7.1f}"
        start = time.perf_counter()
        embedding = TETE(t=1.0, n_components=2, random_state=0).fit_transform(triplets, n)
        ste_s = time.perf_counter() - start
        nn = KNeighborsClassifier(1).fit(embedding[train], y[train])
        row += f"{ste_s:>9.2f}{100 * np.mean(nn.predict(embedding[test]) == y[test]):>7.1f}"
        if not args.skip_cblearn:
            start = time.perf_counter()
            peer = TSTE(n_components=2, random_state=0).fit_transform(triplets, n_objects=n)
            peer_s = time.perf_counter() - start
            nn = KNeighborsClassifier(1).fit(peer[train], y[train])
            row += f"{peer_s:>16.2f}{100 * np.mean(nn.predict(peer[test]) == y[test]):>7.1f}"
        print(row, flush=True)


def memory() -> None:
    print(
        "\nPeak memory of a fit (the default's 20 runs x 20,000 rounds), separate processes; "
        "triplets held by the caller"
    )
    print(
        f"{'items':>9}{'triplets':>12}{'held before MiB':>16}{'peak MiB':>10}{'fit adds MiB':>14}"
    )
    for n in (1000, 100_000):
        for m in (1_000_000, 10_000_000):
            out = subprocess.run(
                [sys.executable, "-c", MEMORY_PROBE.format(repo=str(REPO), n=n, m=m)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            before, after = float(out[0]), float(out[1])
            print(f"{n:>9,}{m:>12,}{before:>16.0f}{after:>10.0f}{after - before:>14.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-cblearn", action="store_true")
    args = parser.parse_args()
    issue_size(args)
    against_embedding(args)
    memory()


if __name__ == "__main__":
    main()
