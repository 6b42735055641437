"""t-ETE's choice of dimension and loss on many answers (up to ImageNet-HSJ's millions).

Cross-validating every loss at every dimension with full-batch descent, as TETE does on
smaller studies, would take hours at 5 million answers. Instead, on one held-out share
of the answers (enough of them that the errors differ by more than their noise):

1. every candidate loss is fitted at a screening dimension (8, or the one given) by a few
   epochs of stochastic steps from scratch, then polished by the authors' full-batch
   descent, which keeps the step where the held-out error was lowest; losses
   `PRUNE_MARGIN` behind the best are dropped;
2. the dimension climbs the candidates above it, each rung starting from the rung
   below's embedding with new coordinates near zero, while a rung lowers the best error
   by more than the tolerance; and goes down the candidates below it, each rung starting
   from the principal axes of the screening embedding, while a rung stays within it;
3. the smallest dimension within the tolerance of the lowest error wins, at its best loss;
   its embedding goes on with full-batch steps over every answer (the held-out share
   included) for as many steps as the held-out answers found worth taking.

Candidates are fitted two at a time (or as many as numba has threads), each in a thread
of its own with single-threaded passes: the same result whatever the machine.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import get_num_threads

from app.learn import _tete_loss as descent
from app.learn._tete_sgd import BLOCK, kernel_tail, sgd_epoch

# From this many answers, "auto" chooses this way (and fixed fits start stochastically).
# On planted studies with human-like noise it chose as well as the folds or better from
# 50,000 answers (500 items) up, and ten to thirty times sooner; at 15,000 answers about
# 300 items its 1,500 held-out answers were too few (0.003 worse on average over eight
# studies, once 0.02).
SCALE_FROM = 100_000
# The held-out share: at most this many answers (the error's standard error ~0.001).
HOLDOUT_MOST = 200_000
SCREEN_DIMENSION = 8
EPOCHS_FROM_SCRATCH = 10
# Unpolished, the losses differ more than they will: only those this far behind go.
SCREEN_MARGIN = 0.03
EPOCHS_WARM = 5
# AdaGrad's learning rate; lower where a fit starts from an embedding worth keeping.
RATE = 1.0
WARM_RATE = 0.3
# Full-batch polish: at most this many steps (or max_iter), stopped after
# POLISH_PATIENCE steps without a lower held-out error.
POLISH_STEPS = 100
POLISH_PATIENCE = 20
FINAL_STEPS_LEAST = 10


class Stopped(Exception):
    """The caller's callback asked to stop; raised again in the calling thread."""


def padded(Y: np.ndarray, d: int, rng) -> np.ndarray:
    """Y with d - Y.shape[1] new coordinates near zero (a hundredth of its spread)."""
    extra = rng.standard_normal((len(Y), d - Y.shape[1])) * (0.01 * Y.std())
    return np.hstack([Y, extra])


def projected(Y: np.ndarray, d: int | None = None) -> np.ndarray:
    """Y centred on its first d principal axes (all of them by default), the one it
    spreads most along first."""
    centred = Y - Y.mean(axis=0)
    _, vectors = np.linalg.eigh(centred.T @ centred)
    return centred @ vectors[:, ::-1][:, : Y.shape[1] if d is None else d]


def ladder(dims: tuple[int, ...], screen: int) -> tuple[int, list[int], list[int]]:
    """The screening dimension among `dims`, the rungs above it and those below it
    (nearest first)."""
    start = max((d for d in dims if d <= screen), default=dims[0])
    return start, [d for d in dims if d > start], [d for d in reversed(dims) if d < start]


def distinct_at(fits: dict, names: dict, d: int) -> dict:
    """Of `fits` (by loss name), one per loss that differs in `d` dimensions (t-STE(d-1)
    is t-STE below 3-D): the one with the lowest held-out error so far."""
    chosen: dict[tuple[float, float], str] = {}
    for name in sorted(fits, key=lambda name: fits[name][2]):
        _, t, k = names[name]
        chosen.setdefault((t, kernel_tail(k, d)), name)
    return {name: fits[name] for name in chosen.values()}


def shuffled(triplets, weights, seed) -> tuple[np.ndarray, np.ndarray]:
    """Copies of both in one random order (as `warm_up` wants them)."""
    rows = np.random.default_rng(seed).permutation(len(triplets))
    return triplets[rows], weights[rows]


def warm_up(Y, triplets, weights, loss, epochs, rate, seed, tick=None) -> np.ndarray:
    """`epochs` stochastic epochs of `loss` from Y (in place) over `shuffled` triplets;
    returns Y."""
    _, t, k = loss
    k = kernel_tail(k, Y.shape[1])
    blocks = np.arange(-(-len(triplets) // BLOCK))
    order = np.random.default_rng(seed)
    squared = np.zeros(len(Y))
    for _ in range(epochs):
        order.shuffle(blocks)
        sgd_epoch(Y, squared, triplets, weights, blocks, rate, t, k)
        if tick is not None:
            tick()
    return Y


def planned_units(n_losses: int, rungs: int, warm: bool) -> int:
    """At most this many epochs and steps in `choose`, the final steps included."""
    screen = EPOCHS_WARM if warm else EPOCHS_FROM_SCRATCH
    return n_losses * (screen + (rungs + 1) * (EPOCHS_WARM + POLISH_STEPS)) + POLISH_STEPS


def choose(model, triplets, weights, n, dims, losses, fit_rows, held_rows, start, report, planned):
    """Choose (dimension, loss) on `held_rows` as the module says and fit the choice on
    every triplet, with the other parameters of `model` (a TETE). `start(d)` gives the
    starting embedding at d (the caller's init where it has d columns, else None);
    `report(units)` is called from this thread at least every half second and may raise
    to stop; `planned(units)` is told the most units it will take, as that comes into
    view. Returns (embedding, final curve, True (the
    final fit takes the steps the held-out answers found worth taking), chosen (d, loss),
    the candidates tried as [(d, loss, held-out error, seconds)], a sentence saying
    why)."""
    polish_steps = min(POLISH_STEPS, model.max_iter)
    seeds = np.random.default_rng(model._fold_seed())
    fit_triplets, fit_weights = shuffled(
        triplets[fit_rows], weights[fit_rows], int(seeds.integers(2**31))
    )
    held = triplets[held_rows]
    stop = threading.Event()
    units = [0]

    def tick(*_) -> None:
        units[0] += 1
        if stop.is_set():
            raise Stopped

    def fit_one(Y, loss, epochs: int, seed: int, polish: bool = True):
        began = time.perf_counter()
        rate = RATE if epochs == EPOCHS_FROM_SCRATCH else WARM_RATE
        warm_up(Y, fit_triplets, fit_weights, loss, epochs, rate, seed, tick)
        steps = 0
        if polish:
            _, t, k = loss
            Y, curve, _ = descent._descend(
                Y, fit_triplets, fit_weights, t, k, np.ones(n), polish_steps, model.patience,
                0.0, float(n), tick, POLISH_PATIENCE, watch=held, threads=False,
                keep_lowest_error=True,
            )  # fmt: skip
            steps = len(curve)
        error = float(descent._violated_share(Y, held))
        return Y, max(steps, 1), error, time.perf_counter() - began

    tried: dict[tuple[int, str], tuple] = {}
    names = {loss[0]: loss for loss in losses}
    with ThreadPoolExecutor(max(1, min(get_num_threads(), len(losses), 4))) as pool:

        def rung(d: int, starts: dict[str, np.ndarray], epochs: int, polish=True) -> dict:
            jobs = {
                name: pool.submit(
                    fit_one, Y, names[name], epochs, int(seeds.integers(2**31)), polish
                )
                for name, Y in starts.items()
            }
            try:
                while not all(job.done() for job in jobs.values()):
                    time.sleep(0.05)
                    if time.perf_counter() - reported[0] > 0.5:
                        reported[0] = time.perf_counter()
                        report(units[0])
            except BaseException:
                stop.set()
                for job in jobs.values():
                    job.exception()
                raise
            results = {name: job.result() for name, job in jobs.items()}
            for name, (_, steps, error, seconds) in results.items():
                tried[(d, name)] = (error, seconds, steps)
            return results

        reported = [time.perf_counter()]
        first, above, below = ladder(dims, SCREEN_DIMENSION)
        initial = start(first)
        warm = initial is not None
        if initial is None:
            initial = (
                np.random.default_rng(int(seeds.integers(2**31))).standard_normal((n, first))
                * model.init_scale
            )

        def replan(fits: int, rungs_left: int) -> None:
            # The progress bar's "at most", shrunk as the ladder's end comes into view.
            per_rung = fits * (EPOCHS_WARM + polish_steps)
            planned(units[0] + rungs_left * per_rung + polish_steps)

        # Every loss a few epochs, unpolished: enough to drop those far behind.
        epochs = EPOCHS_WARM if warm else EPOCHS_FROM_SCRATCH
        screened = rung(first, {name: initial.copy() for name in names}, epochs, polish=False)
        lowest = min(result[2] for result in screened.values())
        alive = {n_: r[0] for n_, r in screened.items() if r[2] <= lowest + SCREEN_MARGIN}
        replan(len(alive), 1 + len(above) + len(below))
        alive = rung(first, alive, EPOCHS_WARM)
        lowest = min(result[2] for result in alive.values())
        kept = {(first, n_): r for n_, r in alive.items()}
        current = alive
        for position, d in enumerate(above):
            replan(len(current), len(above) - position + len(below))
            grow = np.random.default_rng(int(seeds.integers(2**31)))
            results = rung(d, {n_: padded(r[0], d, grow) for n_, r in current.items()}, EPOCHS_WARM)
            best_here = min(r[2] for r in results.values())
            if best_here >= lowest - descent.DIMENSION_TOLERANCE:
                kept.update({(d, n_): r for n_, r in results.items()})
                lowest = min(lowest, best_here)
                break
            lowest = best_here
            current = {
                n_: r for n_, r in results.items() if r[2] <= best_here + descent.PRUNE_MARGIN
            }
            kept = {
                key: r for key, r in kept.items() if r[2] <= lowest + descent.DIMENSION_TOLERANCE
            }
            kept.update({(d, n_): r for n_, r in current.items()})
        for position, d in enumerate(below):
            starts = distinct_at(alive, names, d)
            replan(len(starts), len(below) - position)
            results = rung(d, {n_: projected(r[0], d) for n_, r in starts.items()}, EPOCHS_WARM)
            best_here = min(r[2] for r in results.values())
            if best_here > lowest + descent.DIMENSION_TOLERANCE:
                break
            # A lower error down here moves the bar for every dimension, those above too.
            lowest = min(lowest, best_here)
            kept.update({(d, n_): r for n_, r in results.items()})
        replan(0, 0)
    bar = lowest + descent.DIMENSION_TOLERANCE
    within = [key for key, r in kept.items() if r[2] <= bar]
    smallest = min(d for d, _ in within)
    chosen = min((key for key in within if key[0] == smallest), key=lambda key: kept[key][2])
    Y, steps = kept[chosen][0], kept[chosen][1]
    _, t, k = names[chosen[1]]
    done = units[0]
    # As many full-batch steps as the held-out answers found worth taking: where they
    # run out, the fit stopped where it generalised best, not short of settling.
    Y, curve, _ = descent._descend(
        Y, triplets, weights, t, k, np.ones(n), max(steps, min(FINAL_STEPS_LEAST, model.max_iter)),
        model.patience, model.tol, float(n), lambda step, loss: report(done + step),
        model.n_iter_no_change,
    )  # fmt: skip
    candidates = [(d, names[name], *tried[(d, name)][:2]) for d, name in tried]
    why = (
        f"{chosen[1]}, {chosen[0]}-D: the smallest dimension within {descent.DIMENSION_TOLERANCE} "
        f"({bar:.4f}) of the lowest error on {len(held_rows):,} held-out answers, "
        f"{lowest:.4f} ("
        + ", ".join(f"{name} {d}-D: {tried[(d, name)][0]:.4f}" for d, name in tried)
        + f"); {len(triplets):,} answers, enough to choose on one held-out share: each "
        f"candidate fitted once by stochastic epochs and full-batch steps, losses "
        f"{SCREEN_MARGIN} behind after the first epochs dropped, the dimension climbed while "
        "it helped"
    )
    return Y, curve, True, (chosen[0], names[chosen[1]]), candidates, why
