"""Is the served choice model as sure as it should be? (issue 57) On a planted "2 of 8"
study (benchmarks/choice_rank.py's), the chosen candidate refitted on every answer (the
default, `refit=True`) against the candidate served as it was calibrated on the held-out
share (`refit=False`), in the same run: each one's held-out pick accuracy, its mean log
loss on fresh choices, and the temperature those fresh choices would still ask of it (1:
as sure as it should be; below 1: too sure). The planted model's figures are the floor.

    .venv/bin/python benchmarks/choice_calibration.py [--items 1000] [--screens 10000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.learn import ChoiceEmbedding, rank_choices
from app.learn._choice_kernels import probabilities
from app.learn.choice import _calibration
from benchmarks.choice_rank import planted, scaled_for, screens


def fresh_figures(X: np.ndarray, choices, kernel: bool, alpha: float) -> tuple[float, float]:
    """(mean log loss of the fresh choices as served, the temperature they would ask)."""
    widths = choices.n_alternatives.astype(np.int64)
    p = probabilities(X, choices.pairs, widths, kernel, alpha)
    served = float(-np.log(np.maximum(p[:, 0], 1e-300)).mean())
    temperature, _ = _calibration(p, widths)
    return served, temperature


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--screens", type=int, default=10_000)
    parser.add_argument("--held-out", type=int, default=20_000)
    parser.add_argument("--dims", type=int, default=30)
    args = parser.parse_args()
    scale = scaled_for(0.5, min(args.items, 5000), args.dims)
    rng = np.random.default_rng(1)
    X = planted(args.items, args.dims, scale, rng)
    train = rank_choices(*screens(X, args.screens, rng)[:3])
    *test, ceiling = screens(X, args.held_out, rng)
    fresh = rank_choices(*test)
    planted_loss, planted_temperature = fresh_figures(X, fresh, False, 1.0)
    rows = [("planted model", ceiling, planted_loss, planted_temperature, float("nan"))]
    for refit in (True, False):
        began = time.perf_counter()
        model = ChoiceEmbedding(random_state=0, refit=refit).fit(train, n_items=args.items)
        seconds = time.perf_counter() - began
        loss, temperature = fresh_figures(model.embedding_, fresh, model._kernel, model.alpha_)
        name = "refit on every answer (default)" if refit else "candidate as calibrated"
        rows.append((name, model.score(fresh), loss, temperature, seconds))
    chance = float(np.mean(np.log(fresh.n_alternatives)))
    print(
        f"{args.items:,} items, {args.screens:,} '2 of 8' screens, {args.held_out:,} fresh; "
        f"log loss of guessing {chance:.4f}"
    )
    print(f"{'':>34} {'pick acc':>9} {'log loss':>9} {'temperature':>12} {'seconds':>8}")
    for name, accuracy, loss, temperature, seconds in rows:
        print(f"{name:>34} {accuracy:>9.4f} {loss:>9.4f} {temperature:>12.3f} {seconds:>8.0f}")


if __name__ == "__main__":
    main()
