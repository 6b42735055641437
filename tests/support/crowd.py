"""A whole CompRF build by a simulated crowd over HTTP, as users run Closer: `closer
serve` and `closer worker` as processes on one database, digits uploaded through the
API, raters answering with a feature oracle, the web server killed with SIGKILL at the
given answer counts. Used by the end-to-end test and by benchmarks/crowd_build.py."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from sklearn.datasets import load_digits
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.auth.service import create_token
from app.builds import service as builds
from app.core.db import unit_of_work
from app.demo.service import digits_archive
from app.learn import CompRF
from app.models import Assignment, Build, Item, Purpose, Split, Triplet, TripletSource
from app.simulate import CrowdReport, rater_oracle, run_crowd
from tests.support.service import ServiceProcesses
from tests.support.waiting import wait_for

API = "/api/v1"


@dataclass
class CrowdBuild:
    report: CrowdReport
    seconds: float
    kills: int
    acknowledged: int
    stored_twice: int
    acknowledged_missing: int
    accuracy: float
    offline_accuracy: float
    offline_queries: int
    build_queries: int
    screens: dict[Purpose, int]  # answered, by purpose

    @property
    def build_screens(self) -> int:
        """Screens that asked the build's queries (first answers and majority votes)."""
        return sum(self.screens.get(purpose, 0) for purpose in (Purpose.build, Purpose.majority))


def crowd_in_thread(**crowd) -> tuple[threading.Thread, dict]:
    """`run_crowd(**crowd)` in a thread of its own, started; the dict gets its "report",
    or the "error" it raised, for the caller to re-raise."""
    outcome: dict = {}

    def crowd_thread() -> None:
        try:
            outcome["report"] = asyncio.run(run_crowd(**crowd))
        except BaseException as error:
            outcome["error"] = error

    runner = threading.Thread(target=crowd_thread)
    runner.start()
    return runner, outcome


def acknowledged_storage(
    session: Session, project_id: int, acknowledged: list[int]
) -> tuple[int, int]:
    """How the answers the server acknowledged (their query ids) are stored: (queries
    stored more than once, acknowledged answers missing)."""
    acknowledged = set(acknowledged)
    answered = {
        row.id: row.purpose
        for row in session.execute(
            select(Assignment.id, Assignment.purpose).where(
                Assignment.project_id == project_id, Assignment.answered_at.is_not(None)
            )
        )
    }
    unanswered = acknowledged - set(answered)
    # Checks are not triplets: every other acknowledged answer must be one.
    expected = {i for i in acknowledged if answered.get(i) != 4} - unanswered
    # A screen's answer is one judgement of several triplets: counted once.
    answer = func.coalesce(Triplet.judgement_id, -Triplet.id)
    counts = dict(
        session.execute(
            select(Triplet.query_id, func.count(answer.distinct()))
            .where(Triplet.project_id == project_id, Triplet.source == TripletSource.rater)
            .group_by(Triplet.query_id)
        ).all()
    )
    stored_twice = sum(count > 1 for count in counts.values())
    return stored_twice, len(expected - set(counts)) + len(unanswered)


def crowd_build(
    *,
    database_url: str,
    sessions: sessionmaker[Session],
    folder: Path,
    n_items: int,
    n_test: int,
    trees: int,
    raters: int,
    noise: float,
    answers_per_query: int,
    kill_at: tuple[int, ...] = (),
    web_processes: int = 2,
    seed: int = 0,
    timeout: float = 3600,
    sort_size: int = 1,
    noise_model: str = "uniform",
    think_time: float = 0.0,
) -> CrowdBuild:
    with unit_of_work(sessions) as session:
        token = create_token(session=session, researcher_name=f"crowd-{seed}")
    service = ServiceProcesses(database_url, folder, web_processes=web_processes, workers=1)
    service.start()
    started = time.monotonic()
    try:
        http = httpx.Client(
            base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )
        project_id = http.post(f"{API}/projects", json={"name": "digits"}).json()["id"]
        archive = digits_archive(n_items, n_test, random_state=seed)
        http.post(
            f"{API}/projects/{project_id}/items", files={"file": ("digits.zip", archive)}
        ).raise_for_status()
        http.patch(
            f"{API}/projects/{project_id}/rating",
            json={
                "answers_per_rater": 150,
                "random_share": 0.05,
                "attention_rate": 0.02,
                "lease_seconds": 20,
            },
        ).raise_for_status()
        http.put(f"{API}/projects/{project_id}/link", json={"state": "open"}).raise_for_status()
        build = http.post(
            f"{API}/projects/{project_id}/builds",
            json={
                "n_trees": trees,
                "answers_per_query": answers_per_query,
                "random_state": seed,
                "sort_size": sort_size,
            },
        ).json()
        seen: list[CrowdReport] = []
        runner, outcome = crowd_in_thread(
            url=service.url,
            project_id=project_id,
            token=token,
            raters=raters,
            noise=noise,
            noise_model=noise_model,
            think_time=think_time,
            build_id=build["id"],
            seconds=timeout,
            seed=seed + 3,
            on_progress=seen.append,
            progress_every=0.5,
        )
        for at in kill_at:
            wait_for(
                lambda at=at: (seen and seen[-1].answers >= at) or not runner.is_alive(),
                timeout,
                f"{at} answers",
            )
            if not runner.is_alive():
                break
            service.kill_web()
            time.sleep(1.0)  # raters keep retrying against the dead server meanwhile
            service.start_web()
        runner.join(timeout=timeout)
        if "error" in outcome:
            raise outcome["error"]
        report = outcome["report"]
        seconds = time.monotonic() - started
    finally:
        service.stop()

    with sessions() as session:
        stored_twice, missing = acknowledged_storage(session, project_id, report.acknowledged)
        the_build = session.get(Build, build["id"])
        forest = builds.forest(the_build) if report.build_status == "complete" else None
        train_ids = builds.item_ids(the_build)
        keys = dict(session.execute(select(Item.id, Item.key)).all())
        test_keys = session.scalars(
            select(Item.key).where(Item.project_id == project_id, Item.split == Split.test)
        ).all()
        build_queries = the_build.queries_answered
        # Screens answered, by what they asked (a sorting screen once, by its first item).
        screens = dict(
            session.execute(
                select(Assignment.purpose, func.count())
                .where(
                    Assignment.project_id == project_id,
                    Assignment.answered_at.is_not(None),
                    Assignment.screen_id.is_(None),
                )
                .group_by(Assignment.purpose)
            ).all()
        )

    X_all, y_all = load_digits(return_X_y=True)
    rows_of = [int(keys[int(i)].split("-")[1]) for i in train_ids]
    rows_of += [int(key.split("-")[1]) for key in test_keys]
    X, y = X_all[rows_of], y_all[rows_of].astype(str)
    n_train = len(train_ids)
    test = np.arange(n_train, len(X))
    accuracy = float("nan")
    if forest is not None:
        routing = rater_oracle(X, noise, noise_model, seed + 11)
        accuracy = float(np.mean(forest.predict(test, routing) == y[test]))
    offline = CompRF(n_trees=trees, answers_per_query=answers_per_query, random_state=seed).fit(
        np.arange(n_train), y[:n_train], rater_oracle(X, noise, noise_model, seed + 5)
    )
    routing = rater_oracle(X, noise, noise_model, seed + 11)
    offline_accuracy = float(np.mean(offline.predict(test, routing) == y[test]))
    return CrowdBuild(
        report=report,
        seconds=seconds,
        kills=service.restarts,
        acknowledged=len(report.acknowledged),
        stored_twice=stored_twice,
        acknowledged_missing=missing,
        accuracy=accuracy,
        offline_accuracy=offline_accuracy,
        offline_queries=offline.n_queries_,
        build_queries=build_queries,
        screens={Purpose(purpose): count for purpose, count in screens.items()},
    )


@dataclass
class ProjectAnswers:
    """A project's items (in id order) and its answers as item positions, in arrival
    order, with their triplet ids."""

    items: list  # rows of (id, key, label, split)
    triplet_ids: np.ndarray
    triplets: np.ndarray


def project_answers(sessions: sessionmaker[Session], project: int) -> ProjectAnswers:
    with sessions() as session:
        items = session.execute(
            select(Item.id, Item.key, Item.label, Item.split)
            .where(Item.project_id == project)
            .order_by(Item.id)
        ).all()
        rows = np.array(
            session.execute(
                select(Triplet.id, Triplet.anchor_id, Triplet.closer_id, Triplet.farther_id)
                .where(Triplet.project_id == project)
                .order_by(Triplet.id)
            ).all()
        ).reshape(-1, 4)
    ids = np.array([row.id for row in items])
    return ProjectAnswers(items, rows[:, 0], np.searchsorted(ids, rows[:, 1:]))
