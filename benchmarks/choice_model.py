"""The choice model (ChoiceEmbedding, issue 57) against the study's own ceiling and the
implied-triplet t-ETE default, on the same judgements in the same run.

A planted THINGS-like study: items on a sparse non-negative embedding (each item on about
a fifth of the dimensions), odd-one-out judgements drawn from SPoSE's softmax over the
three pairs' dot products, scaled so that the planted model itself predicts about two
thirds of the choices (THINGS' noise ceiling is 67.2 %). Fresh judgements from the same
model are held out. Reported: seconds, peak memory, held-out choice accuracy of

- the planted model (the Bayes ceiling: no model can do better in expectation);
- ChoiceEmbedding's default (dot similarity, l1 chosen on held-out judgements);
- the peer: t-ETE's default choice (TETESearch) on the two triplets each judgement
  implies, predicting the odd one as the item outside the closest pair.

    .venv/bin/python benchmarks/choice_model.py [--items 1854] [--dims 49]
        [--judgements 1460000] [--held-out 100000] [--no-peer]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from app.learn import TETE, ChoiceEmbedding, TETESearch, odd_one_out_choices
from app.learn.judgements import odd_one_out_triplets
from benchmarks._memory import peak_rss_mib, reset_peak

SHARE = 0.2  # of the dimensions an item is on


def planted(items: int, dims: int, scale: float, rng) -> np.ndarray:
    return (rng.random((items, dims)) < SHARE) * rng.gamma(2.0, scale / 2, (items, dims))


def pair_scores(X: np.ndarray, shown: np.ndarray) -> np.ndarray:
    """(m, 3): the similarity of the pair left when each item is taken out."""
    i, j, k = shown.T
    return np.stack(
        [
            np.einsum("md,md->m", X[j], X[k]),
            np.einsum("md,md->m", X[i], X[k]),
            np.einsum("md,md->m", X[i], X[j]),
        ],
        axis=1,
    )


def judgements(X: np.ndarray, m: int, rng) -> tuple[np.ndarray, np.ndarray, float]:
    """m odd-one-outs drawn from the planted softmax, in chunks; and the share of them the
    planted model's most probable odd one predicts."""
    shown_parts, odd_parts, hits = [], [], 0
    for start in range(0, m, 200_000):
        size = min(200_000, m - start)
        shown = np.empty((size, 3), dtype=np.int64)
        shown[:, 0] = rng.integers(0, len(X), size)
        shown[:, 1] = (shown[:, 0] + rng.integers(1, len(X), size)) % len(X)
        third = rng.integers(0, len(X), size)
        clash = (third == shown[:, 0]) | (third == shown[:, 1])
        while clash.any():
            third[clash] = rng.integers(0, len(X), int(clash.sum()))
            clash = (third == shown[:, 0]) | (third == shown[:, 1])
        shown[:, 2] = third
        scores = pair_scores(X, shown)
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        drawn = np.minimum((rng.random(size)[:, None] > np.cumsum(p, axis=1)).sum(axis=1), 2)
        hits += int(np.sum(p.argmax(axis=1) == drawn))
        shown_parts.append(shown)
        odd_parts.append(shown[np.arange(size), drawn])
    return np.concatenate(shown_parts), np.concatenate(odd_parts), hits / m


def scaled_for(ceiling: float, items: int, dims: int, seed: int) -> float:
    """The weights' scale at which the planted model predicts `ceiling` of the choices."""
    low, high = 0.05, 5.0
    for _ in range(20):
        middle = (low * high) ** 0.5
        rng = np.random.default_rng(seed)
        X = planted(items, dims, middle, rng)
        *_, share = judgements(X, 50_000, rng)
        low, high = (middle, high) if share < ceiling else (low, middle)
    return (low * high) ** 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1854)
    parser.add_argument("--dims", type=int, default=49)
    parser.add_argument("--judgements", type=int, default=1_460_000)
    parser.add_argument("--held-out", type=int, default=100_000)
    parser.add_argument("--ceiling", type=float, default=0.67, help="the planted model's share")
    parser.add_argument("--n-components", type=int, default=64)
    parser.add_argument("--no-peer", action="store_true", help="leave t-ETE out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    scale = scaled_for(args.ceiling, args.items, args.dims, args.seed)
    rng = np.random.default_rng(args.seed)
    X = planted(args.items, args.dims, scale, rng)
    shown, odd, _ = judgements(X, args.judgements, rng)
    test_shown, test_odd, ceiling = judgements(X, args.held_out, rng)
    train, test = odd_one_out_choices(shown, odd), odd_one_out_choices(test_shown, test_odd)
    print(
        f"{args.items} items, {args.dims} planted dimensions, {args.judgements:,} odd-one-out "
        f"judgements, {args.held_out:,} held out",
        file=sys.stderr,
    )

    rows = [("planted model (Bayes ceiling)", ceiling, 0.0, float("nan"), args.dims)]
    reset_peak()
    started = time.perf_counter()
    model = ChoiceEmbedding(n_components=args.n_components, random_state=args.seed)
    model.fit(
        train,
        n_items=args.items,
        callback=lambda done, loss: print(f"  pass {done}: {loss:.4f}", file=sys.stderr),
    )
    seconds = time.perf_counter() - started
    rows.append(
        (
            "ChoiceEmbedding (dot, l1 auto)",
            model.score(test),
            seconds,
            peak_rss_mib(),
            model.n_components_,
        )
    )
    print(f"  {model.selection_['why']}", file=sys.stderr)

    if not args.no_peer:
        triplets, _ = odd_one_out_triplets(shown, odd)
        reset_peak()
        started = time.perf_counter()
        peer = TETESearch(TETE(random_state=args.seed)).fit(triplets, n_items=args.items)
        seconds = time.perf_counter() - started
        Y = peer.embedding_
        i, j, k = test_shown.T
        # The odd one is the item outside the closest pair.
        distances = np.stack(
            [((Y[j] - Y[k]) ** 2).sum(1), ((Y[i] - Y[k]) ** 2).sum(1), ((Y[i] - Y[j]) ** 2).sum(1)],
            axis=1,
        )
        predicted = test_shown[np.arange(len(test_shown)), distances.argmin(axis=1)]
        rows.append(
            (
                "t-ETE default on implied triplets",
                float(np.mean(predicted == test_odd)),
                seconds,
                peak_rss_mib(),
                Y.shape[1],
            )
        )

    print()
    print(f"{'':>34} {'held-out acc':>12} {'seconds':>8} {'peak MiB':>9} {'dims':>5}")
    for name, accuracy, seconds, peak, dims in rows:
        print(f"{name:>34} {accuracy:>12.4f} {seconds:>8.1f} {peak:>9.0f} {dims:>5}")
    print(f"ChoiceEmbedding: {100 * (rows[1][1] - ceiling):+.2f} points from the ceiling")


if __name__ == "__main__":
    main()
