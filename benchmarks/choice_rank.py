"""The choice model on an ImageNet-HSJ-like "2 of 8" study (issue 57): 50,000 items, each
screen a reference and 8 items of which the rater picks the 2 most alike in turn, against
the planted model and the implied-triplet t-ETE default, on the same screens in one run.

Planted: a sparse non-negative embedding (each item on about a fifth of `--dims`
dimensions), each pick drawn from the softmax of the reference's dot products with the
items left, scaled so that the planted model's likeliest first pick is the one drawn
`--ceiling` of the time. Fresh screens are held out. Reported per model: the held-out
accuracy of each pick (the share of picks the model finds likeliest among the items
left, the chance of which is 1/8 then 1/7), seconds and peak memory; t-ETE predicts a
pick as the nearest item left.

    .venv/bin/python benchmarks/choice_rank.py [--items 50000] [--screens 500000]
        [--dims 30] [--held-out 50000] [--no-peer]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.learn import TETE, ChoiceEmbedding, TETESearch, rank_choices
from app.learn.judgements import rank_triplets
from benchmarks._memory import peak_rss_mib, reset_peak

SHOWN, PICKS = 8, 2


def planted(items: int, dims: int, scale: float, rng) -> np.ndarray:
    return (rng.random((items, dims)) < 0.2) * rng.gamma(2.0, scale / 2, (items, dims))


def distinct_rows(items: int, m: int, width: int, rng) -> np.ndarray:
    """m rows of `width` distinct items, drawn without a permutation of all of them."""
    rows = rng.integers(0, items, (m, width))
    while True:
        ordered = np.sort(rows, axis=1)
        clash = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        if not clash.any():
            return rows
        rows[clash] = rng.integers(0, items, (int(clash.sum()), width))


def screens(X: np.ndarray, m: int, rng):
    """m "2 of 8" screens: reference, shown (m, 8), picks (m, 2) drawn in turn; and the
    share of picks the planted model's likeliest is."""
    drawn_rows = distinct_rows(len(X), m, SHOWN + 1, rng)
    reference, shown = drawn_rows[:, 0], drawn_rows[:, 1:]
    chosen = np.empty((m, PICKS), dtype=np.int64)
    left, hits = shown.copy(), 0
    for step in range(PICKS):
        scores = np.einsum("md,mkd->mk", X[reference], X[left])
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        drawn = np.minimum(
            (rng.random(m)[:, None] > np.cumsum(p, axis=1)).sum(axis=1), left.shape[1] - 1
        )
        hits += int(np.sum(p.argmax(axis=1) == drawn))
        chosen[:, step] = left[np.arange(m), drawn]
        keep = np.ones_like(left, dtype=bool)
        keep[np.arange(m), drawn] = False
        left = left[keep].reshape(m, -1)
    return reference, shown, chosen, hits / (m * PICKS)


def scaled_for(ceiling: float, items: int, dims: int) -> float:
    low, high = 0.05, 10.0
    for _ in range(16):
        middle = (low * high) ** 0.5
        rng = np.random.default_rng(0)
        X = planted(items, dims, middle, rng)
        *_, share = screens(X, 20_000, rng)
        low, high = (middle, high) if share < ceiling else (low, middle)
    return (low * high) ** 0.5


def nearest_pick_accuracy(Y: np.ndarray, reference, shown, chosen) -> float:
    """t-ETE's picks: the nearest item left to the reference, in turn."""
    hits, left = 0, shown.copy()
    m = len(reference)
    for step in range(PICKS):
        distance = ((Y[left] - Y[reference][:, None, :]) ** 2).sum(axis=2)
        hits += int(np.sum(left[np.arange(m), distance.argmin(axis=1)] == chosen[:, step]))
        keep = left != chosen[:, step][:, None]
        left = left[keep].reshape(m, -1)
    return hits / (m * PICKS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--screens", type=int, default=500_000)
    parser.add_argument("--held-out", type=int, default=50_000)
    parser.add_argument("--dims", type=int, default=30)
    parser.add_argument("--ceiling", type=float, default=0.5)
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()

    scale = scaled_for(args.ceiling, min(args.items, 5000), args.dims)
    rng = np.random.default_rng(1)
    X = planted(args.items, args.dims, scale, rng)
    train = screens(X, args.screens, rng)
    test = screens(X, args.held_out, rng)
    ceiling = test[3]
    print(
        f"{args.items:,} items, {args.dims} planted dimensions, {args.screens:,} '2 of 8' "
        f"screens ({PICKS * args.screens:,} choices), {args.held_out:,} held out",
        file=sys.stderr,
    )
    rows = [("planted model (Bayes ceiling)", ceiling, float("nan"), float("nan"), args.dims)]
    reset_peak()
    began = time.perf_counter()
    model = ChoiceEmbedding(random_state=0).fit(rank_choices(*train[:3]), n_items=args.items)
    rows.append(
        (
            "ChoiceEmbedding (dot, l1 auto)",
            model.score(rank_choices(*test[:3])),
            time.perf_counter() - began,
            peak_rss_mib(),
            model.n_components_,
        )
    )
    print(f"  {model.selection_['why']}", file=sys.stderr)
    if not args.no_peer:
        triplets, _ = rank_triplets(*train[:3])
        reset_peak()
        began = time.perf_counter()
        peer = TETESearch(TETE(random_state=0)).fit(triplets, n_items=args.items)
        rows.append(
            (
                f"t-ETE default on {len(triplets):,} implied triplets",
                nearest_pick_accuracy(peer.embedding_, *test[:3]),
                time.perf_counter() - began,
                peak_rss_mib(),
                peer.embedding_.shape[1],
            )
        )
    print()
    print(f"{'':>46} {'pick acc':>8} {'seconds':>8} {'peak MiB':>9} {'dims':>5}")
    for name, accuracy, seconds, peak, dims in rows:
        print(f"{name:>46} {accuracy:>8.4f} {seconds:>8.0f} {peak:>9.0f} {dims:>5}")
    print(f"ChoiceEmbedding: {100 * (rows[1][1] - ceiling):+.2f} points from the ceiling")


if __name__ == "__main__":
    main()
