"""ImageNet-sized studies for the embedding (issue 33): the library's fits of a planted
study, the service's default (dimension and loss chosen) against the fixed-dimension
fits and cblearn's TSTE, in the same run.

A study like ImageNet-HSJ's: items around `--clusters` centres in a latent space of
`--latent` dimensions, answers to uniformly drawn questions with human-like noise
(logistic in the difference of distances, scale 0.5), and 100,000 fresh answers of the
same kind held out. Per size (items:answers), each fit's chosen loss and dimension,
held-out triplet error, seconds and how far the fit raised the process's peak memory; the
planted points' own error is the floor the answers allow. cblearn's TSTE (2-D, its
default, and 8-D) runs at the sizes up to `--cblearn-max` answers where it is installed
(`scripts/bench-peers`, see benchmarks/README.md). `--only-default` runs the
service's default alone, for the scaling curve.

    .venv/bin/python benchmarks/imagenet_scale.py [--sizes 5000:500000,50000:5000000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.learn import TETE, FeatureOracle, TETESearch, triplet_error
from benchmarks._memory import current_rss_mib, peak_rss_mib, reset_peak

HELD_OUT = 100_000


def planted_study(
    items: int, answers: int, latent: int, clusters: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The planted points, their clusters, the answers to learn from and the fresh answers
    held out."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(clusters, latent))
    cluster = rng.integers(0, clusters, items)
    X = centres[cluster] + rng.normal(size=(items, latent))
    oracle = FeatureOracle(X, noise_scale=0.5, random_state=seed + 1)

    def asked(count: int) -> np.ndarray:
        drawn = rng.integers(0, items, size=(int(count * 1.01) + 10, 3))
        distinct = (
            (drawn[:, 0] != drawn[:, 1])
            & (drawn[:, 0] != drawn[:, 2])
            & (drawn[:, 1] != drawn[:, 2])
        )
        return oracle.answer(drawn[distinct][:count])

    return X, cluster, asked(answers), asked(HELD_OUT)


FITS = {
    "service default (dimension, loss chosen)": lambda: TETESearch(TETE(random_state=0)),
    "previous default (2-D, loss chosen)": lambda: TETESearch(
        TETE(random_state=0), dimensions=None
    ),
    "fixed 8-D t-STE": lambda: TETE(n_components=8, t=1.0, random_state=0),
    "fixed 16-D t-STE": lambda: TETE(n_components=16, t=1.0, random_state=0),
    "fixed 8-D SOE": lambda: TETE(n_components=8, loss="SOE", random_state=0),
    "fixed 16-D SOE": lambda: TETE(n_components=16, loss="SOE", random_state=0),
}
DEFAULT = "service default (dimension, loss chosen)"


def _timed(fit) -> tuple[np.ndarray, float, float, str]:
    reset_peak()
    before = current_rss_mib()
    started = time.perf_counter()
    embedding, chose = fit()
    return embedding, time.perf_counter() - started, peak_rss_mib() - before, chose


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000:500000", help="items:answers, comma-separated")
    parser.add_argument("--latent", type=int, default=8)
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--cblearn-max", type=int, default=1_000_000)
    parser.add_argument("--cblearn-dims", default="2,8", help="cblearn TSTE's dimensions")
    parser.add_argument(
        "--only-default",
        action="store_true",
        help="the service's default alone (the scaling curve: fit time and memory by size)",
    )
    args = parser.parse_args()
    try:
        from cblearn.embedding import TSTE
    except ImportError:
        TSTE = None
    for size in args.sizes.split(","):
        items, answers = (int(part) for part in size.split(":"))
        X, _, train, test = planted_study(items, answers, args.latent, args.clusters)
        print(
            f"\n{items:,} items, {answers:,} answers (planted: {args.clusters} clusters in "
            f"{args.latent}-D, logistic noise 0.5), {HELD_OUT:,} fresh answers held out"
        )
        print(f"{'fit':<38}{'chose':>16}{'held-out':>10}{'seconds':>9}{'+peak MB':>9}")
        print(f"{'planted points':<38}{'':>16}{triplet_error(X, test):>10.4f}")
        measured = {}
        fits = {DEFAULT: FITS[DEFAULT]} if args.only_default else FITS
        for name, made in fits.items():

            def fit(made=made, train=train, items=items):
                model = made().fit(train, n_items=items)
                return model.embedding_, f"{model.loss_} {model.n_components_}-D"

            embedding, seconds, peak, chose = _timed(fit)
            error = triplet_error(embedding, test)
            measured[name] = (error, seconds)
            print(f"{name:<38}{chose:>16}{error:>10.4f}{seconds:>9.1f}{peak:>9.0f}", flush=True)
        default_error, default_seconds = measured[DEFAULT]
        fixed = [name for name in measured if name.startswith("fixed")]
        if fixed:
            best_fixed = min(fixed, key=measured.get)
            print(
                f"default against the best fixed fit ({best_fixed}): held-out "
                f"{default_error - measured[best_fixed][0]:+.4f}",
            )
        print(f"default against the planted points: {default_error - triplet_error(X, test):+.4f}")
        if TSTE is None:
            print("cblearn TSTE: not installed here (see the module's docstring)")
        elif answers <= args.cblearn_max:
            for d in (int(d) for d in args.cblearn_dims.split(",")):

                def peer(d=d, train=train, items=items):
                    embedded = TSTE(n_components=d, random_state=0).fit_transform(
                        train, n_objects=items
                    )
                    return embedded, f"t-STE {d}-D"

                embedding, seconds, peak, chose = _timed(peer)
                error = triplet_error(embedding, test)
                print(
                    f"{'cblearn TSTE ' + str(d) + '-D':<38}{chose:>16}{error:>10.4f}"
                    f"{seconds:>9.1f}{peak:>9.0f}",
                    flush=True,
                )
                print(
                    f"  default: {seconds / default_seconds:.1f}x faster, held-out "
                    f"{default_error - error:+.4f}"
                )


if __name__ == "__main__":
    main()
