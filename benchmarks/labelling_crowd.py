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
- uniform (the peer): every question uniformly random (`random_share` 1).

Reported per arm: the served TripletBoost and t-ETE (kNN in the map) labels of the 60
unlabelled digits (accuracy over all 60, coverage), the answers' p50/p99 latency, and
the time the worker spent proposing (per 1,000 proposals). Then 300 raters answer the
samplers' project at once while a refit and a proposal refresh run: the answer path's
p99 under that load.

    .venv/bin/python benchmarks/labelling_crowd.py [--answers 20000] [--seeds 0,1]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from app.auth.service import create_token  # noqa: E402
from app.core import migrations  # noqa: E402
from app.core.db import make_engine, make_session_factory, unit_of_work  # noqa: E402
from app.demo.service import digits_archive  # noqa: E402
from app.models import Project  # noqa: E402
from app.scheduling import proposals  # noqa: E402
from app.simulate import run_crowd  # noqa: E402
from tests.support.crowd import wait_for  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402
from tests.support.service import ServiceProcesses  # noqa: E402

API = "/api/v1"
N_ITEMS, N_UNLABELLED = 300, 60
ROUND = 250  # answers per round: under a batch of proposals (proposals.BATCH)


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
        standing.proposed_at is not None and standing.proposed_at >= standing.fitted_at
    )


def standing_of(sessions, project: int) -> proposals.Standing | None:
    with sessions() as session:
        return next((s for s in proposals.standings(session) if s.project_id == project), None)


def topped_up(sessions, project: int) -> bool:
    standing = standing_of(sessions, project)
    return standing is not None and standing.open_count >= proposals.REFILL_BELOW


def run_arm(service, http, token, sessions, arm: str, seed: int, budget: int, noise: float):
    project = http.post(f"{API}/projects", json={"name": f"digits-{arm}-{seed}"}).json()["id"]
    archive = digits_archive(N_ITEMS, 0, random_state=seed, n_unlabelled=N_UNLABELLED)
    http.post(
        f"{API}/projects/{project}/items", files={"file": ("d.zip", archive)}
    ).raise_for_status()
    settings = {"answers_per_rater": 100_000, "attention_rate": 0.0}
    if arm == "uniform":
        settings["random_share"] = 1.0
    http.patch(f"{API}/projects/{project}/rating", json=settings).raise_for_status()
    models = {}
    for kind in ("tripletboost", "tete"):
        response = http.post(
            f"{API}/projects/{project}/models", json={"name": kind, "kind": kind, "train": False}
        )
        response.raise_for_status()
        models[kind] = response.json()["id"]
    items = http.get(f"{API}/projects/{project}/items/export", params={"format": "json"}).json()
    asked = [item["key"] for item in items if item.get("split") == "unlabelled"]
    _, y = load_digits(return_X_y=True)
    truth = np.array([str(y[int(key.split("-")[1])]) for key in asked], dtype=object)

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
        report = asyncio.run(
            run_crowd(
                url=service.url,
                project_id=project,
                token=token,
                raters=10,
                think_time=0,
                noise=noise,
                noise_model="human",
                answers_each=ROUND // 10,
                seed=seed * 1000 + round_number,
            )
        )
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
    args = parser.parse_args()

    server = start_postgres()
    folder = Path(tempfile.mkdtemp(prefix="closer-labelling-"))
    results = []
    try:
        url = server.create_database("labelling_bench")
        migrations.upgrade(url)
        engine = make_engine(url)
        sessions = make_session_factory(engine)
        with unit_of_work(sessions) as session:
            token = create_token(session=session, researcher_name="bench")
        service = ServiceProcesses(url, folder / "data", web_processes=2, workers=1).start()
        try:
            http = httpx.Client(
                base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
            )
            load = None
            for seed in (int(s) for s in args.seeds.split(",")):
                for arm in ("samplers", "uniform"):
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
                    boost, tete = found["tripletboost"], found["tete"]
                    print(
                        f"seed {seed} {arm:8s} TripletBoost acc {boost[0]:.2f} cov {boost[1]:.2f}"
                        f" | t-ETE+kNN acc {tete[0]:.2f} cov {tete[1]:.2f}"
                        f" | {found['seconds']:.0f} s",
                        flush=True,
                    )
        finally:
            service.stop()
        engine.dispose()
    finally:
        server.stop()

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
        print(f"mean TripletBoost accuracy, {arm}: {np.mean(boost):.3f}")
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
