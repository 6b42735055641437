"""The noise ceiling a typical study gets from `repeat_share` (issue 57): how wide its
interval is, and how near the planted model's own accuracy (the Bayes ceiling), for the
service's way of repeating screens against a uniform pool, on the same simulated crowds.

A planted THINGS-like study (benchmarks/choice_model.py: 1,854 items on a sparse
non-negative embedding, odd-one-out choices drawn from SPoSE's softmax, scaled so the
planted model predicts two thirds). Each of `raters` raters answers `answers` screens
(the rating settings' default is 40); a `repeat_share` of them repeat a screen:

- the service's rule (app/scheduling/screens.py): the repeated screens fill in turn, each
  until REPEAT_RATERS raters answered it, a rater never getting one twice;
- the peer: a uniform pool of 100 screens, each repeat one of them at random.

Per setting, over `--seeds` crowds: the repeated screens, raters per screen, the ceiling
(app/learn/ceiling.py: the others' majority), the screens' own majority share and the
midpoint of the two, the 95 % interval's width, the Bayes ceiling of the same screens
(the mean of each screen's likeliest choice's probability), and how often the interval
holds it.

    .venv/bin/python benchmarks/noise_ceiling.py [--raters 50,100,300] [--answers 40]
        [--shares 0.05,0.1,0.2] [--seeds 20]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.formats import REPEAT_RATERS
from app.learn.ceiling import noise_ceiling
from benchmarks.choice_model import pair_scores, planted, scaled_for

POOL = 100  # the peer's pool


def crowd(X, raters: int, answers: int, share: float, rule: str, rng):
    """(screen, rater, choice) of every answer to a repeated screen, and the Bayes
    ceiling of the screens answered twice or more."""
    repeated: list[np.ndarray] = []  # the repeated screens, in the order they are drawn
    counts: list[int] = []
    rows = []
    for rater in range(raters):
        had: set[int] = set()
        for _ in range(answers):
            if rng.random() >= share:
                continue  # a fresh random screen: nobody else answers it
            if rule == "pool":
                number = int(rng.integers(POOL))
                if number in had:
                    continue
            else:
                number = next(
                    (n for n, c in enumerate(counts) if c < REPEAT_RATERS and n not in had),
                    len(counts),
                )
            while number >= len(repeated):
                repeated.append(rng.choice(len(X), 3, replace=False))
                counts.append(0)
            had.add(number)
            counts[number] += 1
            rows.append((number, rater))
    if not rows:
        return None, None
    screens = np.array([number for number, _ in rows])
    shown = np.array(repeated)[screens]
    scores = pair_scores(X, shown)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    drawn = (rng.random(len(rows))[:, None] > np.cumsum(p, axis=1)).sum(axis=1).clip(0, 2)
    choice = shown[np.arange(len(rows)), drawn]
    found = noise_ceiling(screens, [rater for _, rater in rows], choice)
    if found is None:
        return None, None
    twice = np.bincount(screens) >= 2
    screen_p = np.zeros((len(repeated), 3))
    screen_p[screens] = p
    return found, float(screen_p[twice].max(axis=1).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1854)
    parser.add_argument("--dims", type=int, default=49)
    parser.add_argument("--raters", default="50,100,300")
    parser.add_argument("--answers", type=int, default=40)
    parser.add_argument("--shares", default="0.05,0.1,0.2")
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()

    scale = scaled_for(0.67, args.items, args.dims, 0)
    X = planted(args.items, args.dims, scale, np.random.default_rng(0))
    print(
        f"{'raters':>6} {'share':>5} {'rule':>7} {'screens':>7} {'per screen':>10} "
        f"{'ceiling':>7} {'majority':>8} {'midway':>6} {'Bayes':>6} {'CI width':>8} "
        f"{'holds Bayes':>11}"
    )
    for raters in (int(r) for r in args.raters.split(",")):
        for share in (float(s) for s in args.shares.split(",")):
            for rule in ("service", "pool"):
                found = []
                for seed in range(args.seeds):
                    rng = np.random.default_rng(1000 + seed)
                    ceiling, bayes = crowd(X, raters, args.answers, share, rule, rng)
                    if ceiling is not None:
                        found.append((ceiling, bayes))
                if not found:
                    print(f"{raters:>6} {share:>5.2f} {rule:>7}  no screen answered twice")
                    continue
                screens = np.mean([c.screens for c, _ in found])
                per = np.mean([c.answers / c.screens for c, _ in found])
                accuracy = np.mean([c.accuracy for c, _ in found])
                majority = np.mean([c.majority_share for c, _ in found])
                bayes = np.mean([b for _, b in found])
                width = np.mean([c.high - c.low for c, _ in found])
                holds = np.mean([c.low <= b <= c.high for c, b in found])
                print(
                    f"{raters:>6} {share:>5.2f} {rule:>7} {screens:>7.0f} {per:>10.1f} "
                    f"{accuracy:>7.3f} {majority:>8.3f} {(accuracy + majority) / 2:>6.3f} "
                    f"{bayes:>6.3f} {width:>8.3f} {holds:>11.2f}"
                )


if __name__ == "__main__":
    main()
