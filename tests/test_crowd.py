"""The whole loop as users run it, on PostgreSQL: `closer serve` with two web processes,
a `closer worker`, and a simulated crowd (`closer simulate`'s engine) answering over
HTTP with 10% noise and 3 answers per query, while the web server is killed with SIGKILL
twice. The build completes, no acknowledged answer is lost or stored twice, and the
forest classifies held-out digits as well as the library's offline build."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sqlalchemy import func, select

from app.auth.service import create_token
from app.builds import service as builds
from app.core import migrations
from app.core.db import make_engine, make_session_factory, unit_of_work
from app.demo.service import digits_archive
from app.learn import CompRF, FeatureOracle
from app.models import Assignment, Build, Item, Split, Triplet, TripletSource
from app.simulate import run_crowd
from tests.support.service import ServiceProcesses

API = "/api/v1"
N_ITEMS, N_TEST, TREES, NOISE, ANSWERS_PER_QUERY = 300, 60, 3, 0.1, 3


@pytest.fixture
def database(make_database_url):
    url = make_database_url("postgresql", "crowd")
    migrations.upgrade(url)
    engine = make_engine(url)
    yield url, make_session_factory(engine)
    engine.dispose()


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_crowd_builds_a_forest_over_http_through_two_server_kills(database, tmp_path):
    url, sessions = database
    with unit_of_work(sessions) as session:
        token = create_token(session=session, researcher_name="crowd-test")
    auth = {"Authorization": f"Bearer {token}"}
    service = ServiceProcesses(url, tmp_path / "data", web_processes=2, workers=1)
    service.start()
    try:
        http = httpx.Client(base_url=service.url, headers=auth, timeout=60)
        project_id = http.post(f"{API}/projects", json={"name": "digits"}).json()["id"]
        archive = digits_archive(N_ITEMS, N_TEST, random_state=0)
        uploaded = http.post(
            f"{API}/projects/{project_id}/items", files={"file": ("digits.zip", archive)}
        )
        assert uploaded.status_code == 201, uploaded.text
        http.patch(
            f"{API}/projects/{project_id}/rating",
            json={
                "answers_per_rater": 150,
                "random_share": 0.05,
                "attention_rate": 0.02,
                "lease_seconds": 20,
            },
        ).raise_for_status()
        build = http.post(
            f"{API}/projects/{project_id}/builds",
            json={"n_trees": TREES, "answers_per_query": ANSWERS_PER_QUERY, "random_state": 0},
        ).json()

        seen = []
        outcome = {}

        def crowd():
            try:
                outcome["report"] = asyncio.run(
                    run_crowd(
                        url=service.url,
                        project_id=project_id,
                        token=token,
                        raters=10,
                        noise=NOISE,
                        think_time=0,
                        build_id=build["id"],
                        seconds=900,
                        seed=3,
                        on_progress=seen.append,
                        progress_every=0.5,
                    )
                )
            except BaseException as error:  # surfaced below
                outcome["error"] = error

        runner = threading.Thread(target=crowd)
        runner.start()
        answered = lambda: seen[-1].answers if seen else 0  # noqa: E731
        for kill_at in (1500, 5000):
            wait_for(lambda at=kill_at: answered() >= at or not runner.is_alive(), 600, "answers")
            assert runner.is_alive(), outcome
            service.kill_web()
            time.sleep(1.0)  # raters keep retrying against a dead server meanwhile
            service.start_web()
        runner.join(timeout=900)
        assert "error" not in outcome, outcome.get("error")
        report = outcome["report"]
        assert report.build_status == "complete", report.summary()
        assert report.retries > 0  # the kills were felt
    finally:
        service.stop()

    with sessions() as session:
        # Every acknowledged answer is stored, once.
        acknowledged = set(report.acknowledged)
        assert len(acknowledged) == len(report.acknowledged)
        rows = session.execute(
            select(Assignment.id, Assignment.purpose, Assignment.answered_at).where(
                Assignment.id.in_(acknowledged)
            )
        ).all()
        assert len(rows) == len(acknowledged) and all(row.answered_at for row in rows)
        expected_triplets = {row.id for row in rows if row.purpose != 4}
        stored = session.execute(
            select(Triplet.query_id, func.count())
            .where(Triplet.project_id == project_id, Triplet.source == TripletSource.rater)
            .group_by(Triplet.query_id)
        ).all()
        counts = dict(stored)
        assert max(counts.values()) == 1  # nothing stored twice
        assert expected_triplets <= set(counts)  # nothing acknowledged is missing

        # The forest against the library's offline build with the same noise and redundancy.
        forest = builds.forest(session.get(Build, build["id"]))
        train_ids = builds.item_ids(session.get(Build, build["id"]))
        keys = dict(session.execute(select(Item.id, Item.key)).all())
        test_keys = session.scalars(
            select(Item.key).where(Item.project_id == project_id, Item.split == Split.test)
        ).all()
    X_all, y_all = load_digits(return_X_y=True)
    digit = lambda key: int(key.split("-")[1])  # noqa: E731
    train_rows = [digit(keys[int(i)]) for i in train_ids]
    test_rows = [digit(key) for key in test_keys]
    X = X_all[train_rows + test_rows]
    y = y_all[train_rows + test_rows].astype(str)
    n_train = len(train_rows)
    test = np.arange(n_train, len(X))
    routing = FeatureOracle(X, noise=NOISE, random_state=11)
    ours = np.mean(forest.predict(test, routing) == y[test])
    offline = CompRF(n_trees=TREES, answers_per_query=ANSWERS_PER_QUERY, random_state=0).fit(
        np.arange(n_train), y[:n_train], FeatureOracle(X, noise=NOISE, random_state=5)
    )
    theirs = np.mean(
        offline.predict(test, FeatureOracle(X, noise=NOISE, random_state=11)) == y[test]
    )
    print(
        f"held-out accuracy: crowd over HTTP {ours:.3f}, offline {theirs:.3f}; {report.summary()}"
    )
    assert ours > 0.75 and abs(ours - theirs) <= 0.10
