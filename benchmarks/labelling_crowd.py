"""Labelling by a simulated crowd over HTTP: the samplers' proposals against uniform
questions, at the issue's size (issue 17).

For each arm a project on PostgreSQL (`closer serve`, one `closer worker`): 300 of
scikit-learn's digits with features, the last 60 unlabelled, a TripletBoost model and a
t-ETE model created with defaults (they refit by themselves as answers grow). Simulated
raters answer over HTTP with human-like noise (wrong on near ties) in rounds of 250
until the budget; after each round the crowd waits until the refits the answers called
for are done and the worker has queued proposals from them and topped them up (a crowd
about as fast as the worker: a person answers in seconds, a refit takes about as long).
Arms:

- samplers: the project's defaults (10 % of questions uniformly random, the rest the
  samplers' proposals, shares chosen from the models);
- uniform (the peer): every question uniformly random (`random_share` 1);
- comprf: CompRF at the same budget, on its own questions (it learns from no others): a
  build over the labelled digits with as many trees as the budget pays for (counted with
  the library first), then the unlabelled digits routed through the forest by the crowd.

Reported per arm: the served TripletBoost and t-ETE (kNN in the map) labels of the 60
unlabelled digits (accuracy over all 60, coverage), the answers' p50/p99 latency, and
the time the worker spent proposing (per 1,000 proposals). Then 300 raters answer the
samplers' project at once while a refit and a proposal refresh run: the answer path's
p99 under that load.

    .venv/bin/python benchmarks/labelling_crowd.py [--answers 20000] [--seeds 0,1]
        [--arms samplers,uniform,comprf] [--save-answers DIR]

`--save-answers` keeps each arm's answers (`DIR/<arm>-<seed>.npz`: triplets as item
positions in arrival order, each item's key, label and split), to try a learner offline
on what the crowd actually answered.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from app.adaptive import proposals  # noqa: E402
from app.auth.service import create_token  # noqa: E402
from app.core import migrations  # noqa: E402
from app.core.db import make_engine, make_session_factory, unit_of_work  # noqa: E402
from app.demo.service import digits_archive  # noqa: E402
from app.learn import CompRF, FeatureOracle  # noqa: E402
from app.models import Assignment, Project, Purpose  # noqa: E402
from app.simulate import run_crowd  # noqa: E402
from tests.support.crowd import project_answers, wait_for  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402
from tests.support.service import ServiceProcesses  # noqa: E402

API = "/api/v1"
N_ITEMS, N_UNLABELLED = 300, 60
ROUND = 250  # answers per round: under a batch of proposals (proposals.BATCH)


def crowd_round(service, token: str, project: int, noise: float, noise_model: str, seed: int):
    """One round: 10 new raters answer ROUND questions between them, at once."""
    return asyncio.run(
        run_crowd(
            url=service.url,
            project_id=project,
            token=token,
            raters=10,
            think_time=0,
            noise=noise,
            noise_model=noise_model,
            answers_each=ROUND // 10,
            seed=seed,
        )
    )


def settled(http, project: int, models: dict[str, int], sessions, proposing: bool) -> bool:
    """No fit queued or running, and (where proposals are served) the newest proposals
    made after the newest fit."""
    for model_id in models.values():
        versions = http.get(f"{API}/projects/{project}/models/{model_id}/versions").json()
        if any(v["status"] in ("queued", "training") for v in versions):
            return False
    if not proposing:
        return True
    standing = standing_of(sessions, project)
    return standing is None or (
        standing.proposed_at is not None
        and (standing.fitted_at is None or standing.proposed_at >= standing.fitted_at)
    )


def standing_of(sessions, project: int) -> proposals.Standing | None:
    with sessions() as session:
        return next((s for s in proposals.standings(session) if s.project_id == project), None)


def topped_up(sessions, project: int) -> bool:
    standing = standing_of(sessions, project)
    return standing is not None and standing.open_count >= proposals.REFILL_BELOW


@dataclass
class DigitsProject:
    """A project of N_ITEMS digits whose last N_UNLABELLED are unlabelled, its link open."""

    id: int
    labelled: list[str]  # keys
    asked: list[str]  # the unlabelled digits' keys
    truth: np.ndarray  # their true labels, as strings


def digits_project(http, name: str, seed: int, **rating) -> DigitsProject:
    """Uploads the digits, sets the rating settings (plus `rating`) and opens the link."""
    project = http.post(f"{API}/projects", json={"name": name}).json()["id"]
    archive = digits_archive(N_ITEMS, 0, random_state=seed, n_unlabelled=N_UNLABELLED)
    http.post(
        f"{API}/projects/{project}/items", files={"file": ("d.zip", archive)}
    ).raise_for_status()
    settings = {"answers_per_rater": 100_000, "attention_rate": 0.0, **rating}
    http.patch(f"{API}/projects/{project}/rating", json=settings).raise_for_status()
    http.put(f"{API}/projects/{project}/link", json={"state": "open"}).raise_for_status()
    items = http.get(f"{API}/projects/{project}/items/export", params={"format": "json"}).json()
    labelled = [item["key"] for item in items if item.get("split") == "train"]
    asked = [item["key"] for item in items if item.get("split") == "unlabelled"]
    _, y = load_digits(return_X_y=True)
    truth = np.array([str(y[int(key.split("-")[1])]) for key in asked], dtype=object)
    return DigitsProject(project, labelled, asked, truth)


@contextmanager
def digits_service(name: str, worker_args: list[list[str]] | None = None):
    """PostgreSQL, `closer serve` (2 web processes) and one `closer worker` (or one per
    entry of `worker_args`, with those options): yields the service, a researcher's HTTP
    client and token, and a session maker."""
    server = start_postgres()
    folder = Path(tempfile.mkdtemp(prefix=f"closer-{name}-"))
    try:
        url = server.create_database(f"{name}_bench")
        migrations.upgrade(url)
        engine = make_engine(url)
        sessions = make_session_factory(engine)
        with unit_of_work(sessions) as session:
            token = create_token(session=session, researcher_name="bench")
        service = ServiceProcesses(
            url,
            folder / "data",
            web_processes=2,
            workers=1,
            worker_args=worker_args,
            compile_kernels=True,
        ).start()
        try:
            http = httpx.Client(
                base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
            )
            yield service, http, token, sessions
        finally:
            service.stop()
            engine.dispose()
    finally:
        server.stop()


def run_arm(service, http, token, sessions, arm: str, seed: int, budget: int, noise: float):
    digits = digits_project(
        http, f"digits-{arm}-{seed}", seed, **({"random_share": 1.0} if arm == "uniform" else {})
    )
    project, asked, truth = digits.id, digits.asked, digits.truth
    models = {}
    for kind in ("tripletboost", "tete"):
        response = http.post(
            f"{API}/projects/{project}/models", json={"name": kind, "kind": kind, "train": False}
        )
        response.raise_for_status()
        models[kind] = response.json()["id"]

    def served(kind: str) -> tuple[float, float]:
        """The serving version's accuracy over the unlabelled digits, and coverage."""
        response = http.post(
            f"{API}/projects/{project}/models/{models[kind]}/predict", json={"items": asked}
        )
        if response.status_code == 409:  # no version ready yet
            return 0.0, 0.0
        labels = np.array([row["label"] for row in response.json()["predictions"]], dtype=object)
        return float(np.mean(labels == truth)), float(np.mean(labels != None))  # noqa: E711

    latencies, started, curve = [], time.perf_counter(), []
    for round_number in range(budget // ROUND):
        report = crowd_round(service, token, project, noise, "human", seed * 1000 + round_number)
        latencies += report.latencies
        wait_for(
            lambda: settled(http, project, models, sessions, arm == "samplers"),
            300,
            f"{arm}: the refits and proposals after round {round_number + 1}",
        )
        if arm == "samplers":  # the queue topped up, once no fit holds the worker
            try:
                wait_for(
                    lambda: (
                        topped_up(sessions, project)
                        and settled(http, project, models, sessions, True)
                    ),
                    60,
                    "proposals",
                )
            except TimeoutError:
                pass  # the samplers have nothing more to ask now: random questions
        answered = (round_number + 1) * ROUND
        if answered % (budget // 4) == 0:  # as the researcher sees it, without a refit asked
            curve.append((answered, served("tripletboost")[0], served("tete")[0]))
    # A last fit on every answer, as a researcher would ask before reading the labels.
    for model_id in models.values():
        http.post(f"{API}/projects/{project}/models/{model_id}/train").raise_for_status()
    wait_for(lambda: settled(http, project, models, sessions, False), 600, f"{arm}: the last fits")
    seconds = time.perf_counter() - started
    found = {
        "seconds": seconds,
        "latencies": np.array(latencies) * 1000,
        "project": project,
        "curve": curve,
    }
    for kind in models:
        found[kind] = served(kind)
    return found, models


def comprf_trees(
    keys: list[str], unlabelled: list[str], budget: int, noise: float, seed: int
) -> int:
    """The trees a budget pays for: one tree's build over the labelled digits and the
    routing of the unlabelled ones through it, counted with the library on the same
    digits (one answer a query, human-like noise)."""
    X, y = load_digits(return_X_y=True)
    rows = [int(key.split("-")[1]) for key in keys + unlabelled]
    scale = FeatureOracle(X[rows]).scale_for_error(noise)
    oracle = FeatureOracle(X[rows], noise_scale=scale, random_state=seed)
    train = np.arange(len(keys))
    forest = CompRF(n_trees=3, random_state=seed).fit(train, y[rows][train].astype(str), oracle)
    built = oracle.n_answered_
    forest.predict(np.arange(len(keys), len(rows)), oracle)
    per_tree = oracle.n_answered_ / 3
    print(
        f"  CompRF: {built / 3:.0f} answers a tree to build, "
        f"{(oracle.n_answered_ - built) / 3:.0f} to route the unlabelled digits through it",
        flush=True,
    )
    return max(1, int(budget // per_tree))


def answers_by_purpose(sessions, project: int) -> dict[str, int]:
    with sessions() as session:
        rows = session.execute(
            select(Assignment.purpose, func.count())
            .where(Assignment.project_id == project, Assignment.answered_at.is_not(None))
            .group_by(Assignment.purpose)
        ).all()
    return {Purpose(purpose).name: count for purpose, count in rows}


def run_comprf_arm(service, http, token, sessions, seed: int, budget: int, noise: float) -> dict:
    """CompRF at the same budget: a build over the labelled digits with as many trees
    as the budget pays for, then the unlabelled digits routed down it, both answered by
    the same simulated crowd (its own questions: CompRF cannot learn from the others)."""
    # No model learns from uniformly random answers here: every answer goes to CompRF.
    digits = digits_project(http, f"digits-comprf-{seed}", seed, random_share=0.0)
    project, labelled, asked = digits.id, digits.labelled, digits.asked
    trees = comprf_trees(labelled, asked, budget, noise, seed)
    build = http.post(
        f"{API}/projects/{project}/builds", json={"n_trees": trees, "random_state": seed}
    )
    build.raise_for_status()
    started = time.perf_counter()
    crowd = {
        "url": service.url,
        "project_id": project,
        "token": token,
        "raters": 10,
        "think_time": 0,
        "noise": noise,
        "noise_model": "human",
    }
    building = asyncio.run(run_crowd(**crowd, build_id=build.json()["id"], seed=seed * 1000))
    routed = http.post(
        f"{API}/projects/{project}/builds/{build.json()['id']}/routings",
        json={"items": asked},
    )
    routed.raise_for_status()
    path = f"{API}/projects/{project}/routings/{routed.json()['id']}"
    routing = asyncio.run(run_crowd(**crowd, routing_id=routed.json()["id"], seed=seed * 1000 + 1))
    result = wait_for(lambda: http.get(path).json()["result"], 120, "CompRF's routing to finish")
    labels = np.array([result.get(key, {}).get("label") for key in asked], dtype=object)
    return {
        "purposes": answers_by_purpose(sessions, project),
        "trees": trees,
        "build_status": building.build_status,
        "answers": building.answers + routing.answers,
        "build_answers": building.answers,
        "seconds": time.perf_counter() - started,
        "comprf": (
            float(np.mean(labels == digits.truth)),
            float(np.mean(labels != None)),  # noqa: E711
        ),
        "latencies": np.array(building.latencies + routing.latencies) * 1000,
    }


def save_answers(sessions, project: int, path: Path) -> None:
    held = project_answers(sessions, project)
    np.savez(
        path,
        triplets=held.triplets,
        keys=np.array([item.key for item in held.items]),
        labels=np.array([item.label or "" for item in held.items]),
        splits=np.array([item.split.value for item in held.items]),
    )


def proposing_cost(sessions, project: int, repeats: int = 3) -> float:
    """Seconds per 1,000 proposals: the worker's refresh (read the answers and models,
    run the samplers, queue them), timed here on the project as it stands, rolled back."""
    times = []
    for _ in range(repeats):
        with sessions() as session:
            project_row = session.get(Project, project)
            started = time.perf_counter()
            done = proposals.refresh(session, project_row, seed=0)
            times.append((time.perf_counter() - started) / max(done.added, 1) * 1000)
            session.rollback()
    return float(np.median(times))


def load_test(service, http, token, project: int, models: dict[str, int], raters: int):
    """`raters` answering at once (a second's thought each) for 30 s while the models
    refit and the worker refreshes the proposals."""
    for model_id in models.values():
        http.post(f"{API}/projects/{project}/models/{model_id}/train").raise_for_status()
    report = asyncio.run(
        run_crowd(
            url=service.url,
            project_id=project,
            token=token,
            raters=raters,
            think_time=1.0,
            noise=0.1,
            noise_model="human",
            seconds=30,
            seed=99,
        )
    )
    return report.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=20_000)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--raters", type=int, default=300, help="for the load test (0: none)")
    parser.add_argument("--arms", default="samplers,uniform,comprf")
    parser.add_argument("--save-answers", type=Path, help="a folder for each arm's answers")
    args = parser.parse_args()
    if args.save_answers:
        args.save_answers.mkdir(parents=True, exist_ok=True)

    results, comprf_rows = [], []
    with digits_service("labelling") as (service, http, token, sessions):
        load = None
        for seed in (int(s) for s in args.seeds.split(",")):
            for arm in args.arms.split(","):
                if arm == "comprf":
                    found = run_comprf_arm(
                        service, http, token, sessions, seed, args.answers, args.noise
                    )
                    comprf_rows.append((seed, found))
                    print(
                        f"seed {seed} comprf   {found['trees']} trees, build"
                        f" {found['build_status']}, {found['answers']:,} answers: acc"
                        f" {found['comprf'][0]:.2f} cov {found['comprf'][1]:.2f}"
                        f" | {found['seconds']:.0f} s",
                        flush=True,
                    )
                    continue
                found, models = run_arm(
                    service, http, token, sessions, arm, seed, args.answers, args.noise
                )
                if arm == "samplers":
                    found["proposing"] = proposing_cost(sessions, found["project"])
                    if args.raters and load is None:
                        load = load_test(
                            service, http, token, found["project"], models, args.raters
                        )
                results.append((seed, arm, found))
                if args.save_answers:
                    path = args.save_answers / f"{arm}-{seed}.npz"
                    save_answers(sessions, found["project"], path)
                boost, tete = found["tripletboost"], found["tete"]
                print(
                    f"seed {seed} {arm:8s} TripletBoost acc {boost[0]:.2f} cov {boost[1]:.2f}"
                    f" | t-ETE+kNN acc {tete[0]:.2f} cov {tete[1]:.2f}"
                    f" | {found['seconds']:.0f} s",
                    flush=True,
                )

    print()
    print(
        f"Labelling {N_UNLABELLED} of {N_ITEMS} digits over HTTP (PostgreSQL), {args.answers:,}"
        f" answers, human-like noise {args.noise:.0%}; accuracy over all {N_UNLABELLED}"
        " unlabelled (no label counts as wrong), coverage"
    )
    print(
        "| seed | questions | TripletBoost acc | cov | t-ETE + kNN acc | cov | answer p50 / p99 ms"
        " | proposing s per 1,000 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for seed, arm, found in results:
        boost, tete, lat = found["tripletboost"], found["tete"], found["latencies"]
        cost = f"{found['proposing']:.3f}" if "proposing" in found else ""
        print(
            f"| {seed} | {arm} | {boost[0]:.2f} | {boost[1]:.2f} | {tete[0]:.2f} | {tete[1]:.2f}"
            f" | {np.percentile(lat, 50):.0f} / {np.percentile(lat, 99):.0f} | {cost} |"
        )
    for arm in ("samplers", "uniform"):
        boost = [found["tripletboost"][0] for _, a, found in results if a == arm]
        if boost:
            print(f"mean TripletBoost accuracy, {arm}: {np.mean(boost):.3f}")
    if comprf_rows:
        print(
            "\nCompRF at the same budget (its own questions: a build over the 240 labelled"
            " digits, then the 60 routed through it; one answer a question)"
        )
        print(
            "| seed | trees | CompRF's answers (build + majority / routing) | random answers"
            " while the worker grew the trees | acc | cov | answer p50 / p99 ms |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for seed, found in comprf_rows:
            lat, purposes = found["latencies"], found["purposes"]
            built = purposes.get("build", 0) + purposes.get("majority", 0)
            routed = purposes.get("routing", 0)
            print(
                f"| {seed} | {found['trees']} | {built + routed:,} ({built:,} / {routed:,})"
                f" | {purposes.get('random', 0):,} | {found['comprf'][0]:.2f}"
                f" | {found['comprf'][1]:.2f} | {np.percentile(lat, 50):.0f} /"
                f" {np.percentile(lat, 99):.0f} |"
            )
    print("\nServed accuracy as the answers arrived (TripletBoost / t-ETE + kNN, auto refits):")
    for seed, arm, found in results:
        points = ", ".join(f"{n:,}: {b:.2f} / {t:.2f}" for n, b, t in found["curve"])
        print(f"  seed {seed} {arm}: {points}")
    if load is not None:
        print(
            f"\n{args.raters} raters at once during a refit and refresh: {load['answers']} answers,"
            f" p50 {load['p50_ms']} ms, p99 {load['p99_ms']} ms"
        )


if __name__ == "__main__":
    main()
