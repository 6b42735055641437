"""The samplers against uniform questions, in the library (issue 17): crowds that err as
people do (on near ties, 10 % of random questions wrong), rounds of 1,000 answers, each
round's questions chosen from the models refitted on the answers so far. The peer, in
the same run, is the same crowd asked uniformly random questions.

- Labelling: 300 of scikit-learn's digits, 60 unlabelled; `ForestLabellingSampler` (the
  service's, with a TripletBoost model) against `PanelLabellingSampler` (TripletBoost
  refitted each round for its class shares), with all of each round's answers theirs
  or 72 % (the service's labelling share; the rest uniform); served accuracy of
  TripletBoost (defaults) over the 60 (no label counts as wrong) and coverage at 5,000,
  10,000 and 20,000 answers.
- Embedding: `EmbeddingSampler` with a t-STE map refitted each round (300 ms of steps)
  asks 90 % of each round (the rest uniformly random, as the service's `random_share`),
  the default t-ETE model fitted every 1,000 answers, measuring its choices on the
  random answers only, as the service does; held-out triplet error on 20,000 fresh
  answers from the same crowd, on 300 planted points in the plane (a map can hold them)
  and on 300 digits in 2-D (it cannot: a floor near 0.25); the answers the sampler needs
  to reach uniform's error at 20,000.

Over HTTP, with the service's mix of purposes: `labelling_crowd.py`.

    .venv/bin/python benchmarks/sampler_gain.py [--seeds 6] [--budget 20000]
        [--labelling-shares 1,0.72] [--random-share 0.1] [--skip-labelling]
        [--skip-embedding]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from app.learn import (  # noqa: E402
    TETE,
    EmbeddingSampler,
    FeatureOracle,
    ForestLabellingSampler,
    PanelLabellingSampler,
    SamplerState,
    TETESearch,
    TripletBoost,
    random_queries,
    triplet_error,
)

ROUND = 1000


def digits(seed: int, n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    X, y = load_digits(return_X_y=True)
    chosen = np.random.default_rng(seed).choice(len(X), n, replace=False)
    return X[chosen], y[chosen].astype(str)


def human_crowd(X: np.ndarray, seed: int) -> FeatureOracle:
    return FeatureOracle(X, noise_scale=FeatureOracle(X).scale_for_error(0.1), random_state=seed)


def labelling(seed: int, budget: int, questions: str, share: float) -> dict[int, tuple]:
    """Served accuracy and coverage over the wanted digits at 5,000, 10,000 and `budget`
    answers; each round `share` of the answers go to the `questions` ("trees", "panel"
    or "uniform"), the rest are uniformly random (the service's mix: 72 %)."""
    X, y = digits(seed)
    n = len(X)
    wanted = np.random.default_rng(seed).choice(n, 60, replace=False)
    train = np.setdiff1d(np.arange(n), wanted)
    labels = y.astype(object)
    labels[wanted] = None
    crowd = human_crowd(X, seed)
    answers = crowd.answer(random_queries(n, ROUND, random_state=seed))
    found = {}
    while True:
        model = None
        if questions == "panel" or len(answers) in (5000, 10000, budget):
            model = TripletBoost(random_state=0).fit(answers, train, y[train])
        if len(answers) in (5000, 10000, budget):
            predicted = model.predict(answers, wanted)
            spoke = np.array([label is not None for label in predicted])
            found[len(answers)] = (float(np.mean(predicted == y[wanted])), float(spoke.mean()))
        if len(answers) >= budget:
            return found
        chosen = round(share * ROUND) if questions != "uniform" else 0
        state = SamplerState(n, answers, labels=labels, wanted=wanted)
        if questions == "panel":
            proba = np.full((n, len(model.classes_)), np.nan)
            proba[wanted] = model.predict_proba(answers, wanted)
            state = SamplerState(
                n, answers, labels=labels, wanted=wanted, classes=model.classes_, class_proba=proba
            )
            sampler = PanelLabellingSampler(random_state=len(answers))
        else:
            sampler = ForestLabellingSampler(random_state=len(answers))
        asked = sampler.propose(chosen, state).queries if chosen else np.empty((0, 3), np.int64)
        rest = random_queries(n, ROUND - len(asked), random_state=seed * 7919 + len(answers))
        answers = np.vstack([answers, crowd.answer(np.vstack([asked, rest]))])


def embedding(X: np.ndarray, seed: int, budget: int, sampled: bool, random_share: float):
    """Held-out error of the default t-ETE model every 1,000 answers. With `sampled`, each
    round asks `random_share` of uniformly random questions and the sampler's for the
    rest, and the fit measures its choices on the random ones only (as the service does:
    answers to chosen questions are biased); else every question is uniformly random."""
    n = len(X)
    crowd = human_crowd(X, seed)
    fresh = human_crowd(X, seed + 1000).answer(random_queries(n, 20_000, random_state=seed + 1))
    answers = crowd.answer(random_queries(n, ROUND, random_state=seed))
    unbiased = np.ones(len(answers), bool)
    errors = {}
    while True:
        fitted = TETESearch(TETE(random_state=0), dimensions=None).fit(
            answers, n_items=n, unbiased=unbiased
        )
        errors[len(answers)] = triplet_error(fitted.embedding_, fresh)
        if len(answers) >= budget:
            return errors
        chosen = round((1 - random_share) * ROUND) if sampled else 0
        asked = np.empty((0, 3), np.int64)
        if chosen:
            Y = TETE(t=1.0, max_iter=300, random_state=0).fit(answers, n_items=n).embedding_
            state = SamplerState(n, answers, embedding=Y)
            asked = EmbeddingSampler(random_state=len(answers)).propose(chosen, state).queries
        rest = random_queries(n, ROUND - len(asked), random_state=seed * 7919 + len(answers))
        unbiased = np.r_[unbiased, np.zeros(len(asked), bool), np.ones(len(rest), bool)]
        answers = np.vstack([answers, crowd.answer(np.vstack([asked, rest]))])


def answers_to_reach(errors: dict[int, float], target: float) -> int | None:
    reached = [count for count, error in sorted(errors.items()) if error <= target]
    return reached[0] if reached else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--budget", type=int, default=20_000)
    parser.add_argument(
        "--labelling-shares", default="1,0.72", help="the samplers' share of each round"
    )
    parser.add_argument(
        "--random-share",
        type=float,
        default=0.1,
        help="uniformly random questions in the embedding sampler's rounds (the service's: 0.1)",
    )
    parser.add_argument("--skip-labelling", action="store_true")
    parser.add_argument("--skip-embedding", action="store_true")
    args = parser.parse_args()
    if not args.skip_labelling:
        compare_labelling(args)
    if not args.skip_embedding:
        compare_embedding(args)


def compare_labelling(args) -> None:

    shares = [float(share) for share in args.labelling_shares.split(",")]
    print(f"Labelling 60 of 300 digits, TripletBoost, {args.seeds} crowds (human-like noise 10 %)")
    print(
        "| crowd | questions | share | 5,000 acc / cov | 10,000 acc / cov "
        f"| {args.budget:,} acc / cov |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    arms = [(name, share) for share in shares for name in ("trees", "panel")] + [("uniform", 0)]
    final = {arm: [] for arm in arms}
    for seed in range(args.seeds):
        for name, share in arms:
            found = labelling(seed, args.budget, name, share)
            final[name, share].append(found[args.budget][0])
            cells = " | ".join(f"{acc:.2f} / {cov:.2f}" for acc, cov in found.values())
            print(f"| {seed} | {name} | {share:.0%} | {cells} |", flush=True)
    for (name, share), values in final.items():
        print(f"mean accuracy at {args.budget:,}, {name} {share:.0%}: {np.mean(values):.3f}")


def compare_embedding(args) -> None:
    print(
        f"\nEmbedding: held-out error on fresh answers, {args.seeds} crowds, the sampler's "
        f"rounds {args.random_share:.0%} uniformly random"
    )
    print(
        "| data | crowd | questions | errors at 2,000 steps of answers | answers to reach "
        f"uniform's error at {args.budget:,} |"
    )
    print("| --- | --- | --- | --- | --- |")
    sets = {
        "planted plane": lambda seed: np.random.default_rng(seed).normal(size=(300, 2)),
        "digits (2-D map)": lambda seed: digits(seed)[0],
    }
    for data, make in sets.items():
        ratios = []
        for seed in range(args.seeds):
            X = make(seed)
            uniform = embedding(X, seed, args.budget, False, args.random_share)
            chosen = embedding(X, seed, args.budget, True, args.random_share)
            target = uniform[args.budget]
            needed = answers_to_reach(chosen, target)
            ratio = f"{needed:,} ({needed / args.budget:.2f}x)" if needed else "not reached"
            ratios.append(needed / args.budget if needed else np.nan)
            for name, errors in (("uniform", uniform), ("sampler", chosen)):
                curve = ", ".join(
                    f"{error:.3f}" for count, error in sorted(errors.items()) if count % 2000 == 0
                )
                cell = ratio if name == "sampler" else ""
                print(f"| {data} | {seed} | {name} | {curve} | {cell} |", flush=True)
        reached = [ratio for ratio in ratios if ratio == ratio]
        print(
            f"{data}: reached uniform's error at {args.budget:,} in {len(reached)} of "
            f"{len(ratios)} crowds"
            + (f", with {np.mean(reached):.2f}x its answers on average" if reached else ""),
            flush=True,
        )


if __name__ == "__main__":
    main()
