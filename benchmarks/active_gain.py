"""What asking actively saves, measured inside a study by its own arms (issue 57), over
HTTP as a lab runs it: PostgreSQL, `closer serve` (2 web processes) and one `closer
worker`. Each study has two arms: `random` (random_share 1: every question uniformly
random, the peer) and `active` (the study's defaults: 10 % random, the rest the samplers'
or CompRF's questions). Simulated raters join through the public link (the arms take
them in turn) and answer in rounds of 250 with a noise model; after each round the crowd
waits for the refits and proposals the answers called for, as in labelling_crowd.py.
Then GET …/models/{id}/gain: the model refitted on each arm's first answers, the answers
the random arm needs for the active arm's error, with its interval. Every refit keeps what
the version chose on all the answers (its dimension and loss); the same version's gain is
also measured here as it was before, each refit choosing again on its own answers (the
peer of the last column).

Scenarios (`--scenarios`):

- embedding: 300 points planted in the plane (3 clusters), no labels: the embedding
  sampler; the default t-ETE model, measured by held-out triplet error;
- labelling: 300 of scikit-learn's digits, 60 of them in the test split (the items whose
  label is wanted, so the labelling sampler asks about them): a TripletBoost model
  (measured by its label error on the 60) and the default t-ETE model;
- comprf: the same digits with a CompRF build of `--trees` trees started on the active
  arm at the start (its queries come first there): TripletBoost's label error on the
  test split, which the build's answers teach too.

Noise (`--noise-models`): "human" errs on near ties (`--noise` of random triplets
wrong), "uniform" errs on any question with that probability.

    .venv/bin/python benchmarks/active_gain.py [--answers 8000] [--seeds 0]
        [--scenarios embedding,labelling,comprf] [--noise-models human,uniform]
        [--random-weight 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sklearn.datasets import make_blobs  # noqa: E402
from sqlalchemy import select  # noqa: E402

from app.demo.service import digits_archive  # noqa: E402
from app.models import ModelVersion  # noqa: E402
from app.training.gain import measure_gain  # noqa: E402
from benchmarks.labelling_crowd import (  # noqa: E402
    ROUND,
    crowd_round,
    digits_service,
    settled,
    topped_up,
)
from tests.support.waiting import wait_for  # noqa: E402

API = "/api/v1"


def arms(random_weight: int) -> list[dict]:
    """The two arms, the random one taking `random_weight` newcomers for each the active
    one takes (targets in that ratio, far beyond the crowd: balanced by places taken)."""
    return [
        {"name": "random", "random_share": 1, "target": random_weight * 1_000_000},
        {"name": "active", "target": 1_000_000},
    ]


def planted_items(seed: int) -> bytes:
    X, _ = make_blobs(n_samples=300, centers=3, n_features=2, cluster_std=2.0, random_state=seed)
    rows = ["key,features"] + [f"p{n},{x:.5f} {y:.5f}" for n, (x, y) in enumerate(X)]
    return "\n".join(rows).encode()


def study(http, name: str, scenario: str, seed: int, random_weight: int) -> int:
    project = http.post(f"{API}/projects", json={"name": name}).json()["id"]
    if scenario == "embedding":
        upload = ("items.csv", planted_items(seed))
    else:
        upload = ("digits.zip", digits_archive(300, 60, random_state=seed))
    http.post(f"{API}/projects/{project}/items", files={"file": upload}).raise_for_status()
    settings = {"answers_per_rater": 100_000, "attention_rate": 0.0, "arms": arms(random_weight)}
    http.patch(f"{API}/projects/{project}/rating", json=settings).raise_for_status()
    http.put(f"{API}/projects/{project}/link", json={"state": "open"}).raise_for_status()
    return project


def run(service, http, token, sessions, scenario, noise_model, noise, seed, budget, trees, weight):
    project = study(http, f"gain-{scenario}-{noise_model}-{seed}", scenario, seed, weight)
    kinds = ("tete",) if scenario == "embedding" else ("tripletboost", "tete")
    models = {}
    for kind in kinds:
        made = http.post(f"{API}/projects/{project}/models", json={"name": kind, "kind": kind})
        made.raise_for_status()
        models[kind] = made.json()["id"]
    build_id = None
    if scenario == "comprf":
        built = http.post(
            f"{API}/projects/{project}/builds", json={"n_trees": trees, "random_state": seed}
        )
        built.raise_for_status()
        build_id = built.json()["id"]
    began = time.perf_counter()
    for round_number in range(budget // ROUND):
        crowd_round(service, token, project, noise, noise_model, seed * 1000 + round_number)
        wait_for(
            lambda: settled(http, project, models, sessions, True),
            300,
            f"{scenario}: the refits and proposals after round {round_number + 1}",
        )
        try:
            wait_for(
                lambda: (
                    topped_up(sessions, project) and settled(http, project, models, sessions, True)
                ),
                30,
                "proposals",
            )
        except (TimeoutError, AssertionError):
            pass  # the samplers have nothing more to ask now
    crowd_seconds = time.perf_counter() - began
    for model_id in models.values():  # a last fit on every answer
        http.post(f"{API}/projects/{project}/models/{model_id}/train").raise_for_status()
    wait_for(lambda: settled(http, project, models, sessions, False), 600, "the last fits")
    gains = {}
    for kind, model_id in models.items():
        url = f"{API}/projects/{project}/models/{model_id}/gain"
        asked = time.perf_counter()
        gain = http.get(url).json()
        while gain["status"] in ("queued", "computing") or not gain.get("current", True):
            time.sleep(1)
            gain = http.get(url).json()
        gain["wait"] = time.perf_counter() - asked
        gain["choosing_again"] = choosing_again(sessions, model_id, gain["version"])
        gains[kind] = gain
    purposes = {}
    if build_id is not None:
        purposes = http.get(f"{API}/projects/{project}/builds/{build_id}").json()
    return crowd_seconds, gains, purposes


def choosing_again(sessions, model_id: int, number: int) -> dict:
    """The same version's gain as measured before each fit kept the version's choices:
    every fit chooses its dimension and loss again on its own answers (in this process,
    on the same database)."""
    with sessions() as session:
        version_id = session.scalars(
            select(ModelVersion.id).where(
                ModelVersion.model_id == model_id, ModelVersion.number == number
            )
        ).one()
        return measure_gain(session, model_id, version_id, lambda *_: None, keep_choices=False)


def ratio(figure: dict) -> str:
    prefix = {"more_than": "> ", "at_most": "≤ ", "exact": ""}[figure["needed"]["bound"]]
    return f"{prefix}{figure['ratio']:.2f}"


def needed(found: dict) -> str:
    prefix = {"more_than": "> ", "at_most": "≤ ", "exact": ""}[found["bound"]]
    return f"{prefix}{found['answers']:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=8000)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--scenarios", default="embedding,labelling,comprf")
    parser.add_argument("--noise-models", default="human,uniform")
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--trees", type=int, default=3)
    parser.add_argument(
        "--random-weight",
        type=int,
        default=1,
        help="newcomers the random arm takes for each the active arm takes (2: its curve "
        "reaches twice as far, to measure gains up to 2x)",
    )
    args = parser.parse_args()
    rows = []
    with digits_service("gain") as (service, http, token, sessions):
        for seed in (int(s) for s in args.seeds.split(",")):
            for scenario in args.scenarios.split(","):
                for noise_model in args.noise_models.split(","):
                    seconds, gains, build = run(
                        service,
                        http,
                        token,
                        sessions,
                        scenario,
                        noise_model,
                        args.noise,
                        seed,
                        args.answers,
                        args.trees,
                        args.random_weight,
                    )
                    for kind, gain in gains.items():
                        rows.append((seed, scenario, noise_model, kind, gain, build))
                        random_arm, active_arm = gain["arms"]
                        figure = active_arm["gain"] or {}
                        again = gain["choosing_again"]["arms"][1]["gain"] or {}
                        print(
                            f"seed {seed} {scenario} {noise_model} {kind}: {gain['measure']}"
                            f" active {figure.get('error', float('nan')):.3f} at"
                            f" {figure.get('answers', 0):,}, random needs"
                            f" {needed(figure['needed']) if figure else '-'}"
                            f" [{needed(figure['low']) if figure else '-'},"
                            f" {needed(figure['high']) if figure else '-'}]"
                            f" ratio {ratio(figure) if figure else '-'}"
                            f" (each fit choosing again: {ratio(again) if again else '-'};"
                            f" kept {gain.get('fixed')})"
                            f" | crowd {seconds:.0f} s, gain measured in {gain['seconds']} s"
                            f" (waited {gain['wait']:.0f} s)",
                            flush=True,
                        )
    print()
    print(
        f"Active against random arms in one study, {args.answers:,} answers"
        f" ({args.random_weight} to the random arm for 1 to the active),"
        f" {args.noise:.0%} noise; PostgreSQL, 2 web processes, 1 worker"
    )
    print(
        "| scenario | noise | model | measure | active arm: answers, error | random arm's error"
        " at its answers | random answers needed (95 % interval) | ratio | ratio, each fit"
        " choosing again |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for seed, scenario, noise_model, kind, gain, _ in rows:
        random_arm, active_arm = gain["arms"]
        figure = active_arm["gain"]
        last = random_arm["curve"][-1] if random_arm["curve"] else None
        if figure is None:
            print(f"| {scenario} | {noise_model} | {kind} | {gain['why']} |")
            continue
        print(
            f"| {scenario} (seed {seed}) | {noise_model} | {kind} | {gain['measure']} |"
            f" {figure['answers']:,}, {figure['error']:.3f} |"
            f" {last['error']:.3f} at {last['answers']:,} |"
            f" {needed(figure['needed'])} ({needed(figure['low'])} – {needed(figure['high'])})"
            f" | {ratio(figure)} |"
            f" {ratio(again) if (again := gain['choosing_again']['arms'][1]['gain']) else '-'} |"
        )
    print("\nCurves (answers: error) per arm:")
    for _, scenario, noise_model, kind, gain, _ in rows:
        for way, measured in (("kept", gain), ("choosing again", gain["choosing_again"])):
            for arm in measured["arms"]:
                points = ", ".join(f"{p['answers']:,}: {p['error']:.3f}" for p in arm["curve"])
                print(f"  {scenario} {noise_model} {kind} {arm['name']} ({way}): {points}")


if __name__ == "__main__":
    main()
