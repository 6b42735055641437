"""t-ETE's choice of dimension and loss (the service's default, TETESearch): as it is now,
on one held-out share where a study has DENSE_FROM answers an item or more, against the
three folds it used before at every size under 100,000 answers (`stochastic_from=None`)
and against cblearn's TSTE, on the same answers in the same run (issue 53: a held-back
human set of 100 items and 93,000 answers took 9.6 s, cblearn 2.0 s).

Planted studies: points in 5 Gaussian clusters in 5-D; random questions answered by a
crowd that errs as people do (on near ties, 10 % of random questions wrong) or with
lapses (10 % flipped at random); 20,000 fresh answers from the same crowd held out.
Reported per study: seconds, held-out triplet error, the choice; the default's error
against the folds' (the target: no higher, within noise) and its speed over theirs and
cblearn TSTE's (2-D, its defaults).

    scripts/bench-peers
    .venv/bin/python benchmarks/tete_choice_speed.py [--shapes 100:93000,200:20000]
        [--noise human,uniform] [--seeds 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from sklearn.datasets import make_blobs

from app.learn import TETE, FeatureOracle, TETESearch, random_triplets, triplet_error


def study(items: int, answers: int, noise: str, seed: int):
    X, _ = make_blobs(n_samples=items, centers=5, n_features=5, cluster_std=2.0, random_state=seed)
    if noise == "human":
        scale = FeatureOracle(X).scale_for_error(0.10)
        oracle = FeatureOracle(X, noise_scale=scale, random_state=seed)
    else:
        oracle = FeatureOracle(X, noise=0.10, random_state=seed)
    train = random_triplets(items, answers, oracle, random_state=seed)
    test = random_triplets(items, 20_000, oracle, random_state=seed + 1)
    return train, test


def timed(fit) -> tuple[float, float, str]:
    started = time.perf_counter()
    embedding, chose = fit()
    return time.perf_counter() - started, embedding, chose


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="100:93000,80:80000,40:40000,150:90000,200:20000")
    parser.add_argument("--noise", default="human,uniform")
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    from cblearn.embedding import TSTE

    TETE(t=1.0, max_iter=2).fit(np.array([[0, 1, 2]] * 30_000), 3)  # compile before timing
    rows = []
    for shape in args.shapes.split(","):
        items, answers = (int(part) for part in shape.split(":"))
        for noise in args.noise.split(","):
            for seed in range(args.seeds):
                train, test = study(items, answers, noise, seed)
                fits = {
                    "default": lambda: TETESearch(TETE(random_state=0)),
                    "folds": lambda: TETESearch(TETE(stochastic_from=None, random_state=0)),
                }
                found = {}
                for name, made in fits.items():

                    def fit(made=made, train=train, items=items):
                        model = made().fit(train, items)
                        return model.embedding_, f"{model.loss_} {model.n_components_}-D"

                    seconds, embedding, chose = timed(fit)
                    found[name] = (seconds, triplet_error(embedding, test), chose)
                seconds, embedding, _ = timed(
                    lambda train=train, items=items: (
                        TSTE(n_components=2, random_state=0).fit_transform(train, n_objects=items),
                        "",
                    )
                )
                found["cblearn TSTE 2-D"] = (seconds, triplet_error(embedding, test), "t-STE 2-D")
                for name, (seconds, error, chose) in found.items():
                    print(
                        f"{items:>5} items {answers:>7,} answers {noise:<8} seed {seed} "
                        f"{name:<18} {seconds:6.2f} s  error {error:.4f}  {chose}",
                        flush=True,
                    )
                rows.append((items, answers, noise, seed, found))
    print()
    print(
        "| items | answers | noise | default: s, error, chose | folds: s, error, chose "
        "| cblearn TSTE: s, error | default − folds error | folds s / default s "
        "| TSTE s / default s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for items, answers, noise, _, found in rows:
        ours, full, peer = (
            found["default"],
            found["folds"],
            found["cblearn TSTE 2-D"],
        )
        print(
            f"| {items:,} | {answers:,} | {noise} | {ours[0]:.2f} s, {ours[1]:.4f}, {ours[2]} "
            f"| {full[0]:.2f} s, {full[1]:.4f}, {full[2]} | {peer[0]:.2f} s, {peer[1]:.4f} "
            f"| {ours[1] - full[1]:+.4f} | {full[0] / ours[0]:.1f}x | {peer[0] / ours[0]:.1f}x |"
        )


if __name__ == "__main__":
    main()
