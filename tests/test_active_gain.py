"""What asking actively saved, from a study's own arms (issue 57), on both databases: an
arm with a random_share of 1 is asked only at random (a build's queries go to the other
arm), and GET …/models/{model}/gain measures each arm's held-out curve and the active
arm's gain once the worker has refitted the model on each arm's first answers."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sqlalchemy import text

from app.models import Assignment, Purpose
from app.training.schemas import LOSS_NAMES
from app.worker.loop import Worker
from tests.support.rating import answer, blob_study, configure, join, start_build

API = "/api/v1"


@pytest.fixture
def blobs():
    return make_blobs(n_samples=40, centers=3, cluster_std=1.0, random_state=4)


@pytest.fixture
def study(client, auth, project, blobs):
    X, y = blobs
    return blob_study(client, auth, project["id"], X, y)


def _run_jobs(app):
    Worker(app.state.session_factory).run(until_idle=True)


def _answer_truly(client, slug, rater, state, X, position, count):
    """Answer `count` comparisons as the items' features say (the nearer one)."""
    for _ in range(count):
        shown = state["comparison"]
        if shown is None:
            return state
        anchor, left, right = (
            X[position[shown[side]["key"]]] for side in ("anchor", "left", "right")
        )
        choice = (
            "left" if np.linalg.norm(anchor - left) < np.linalg.norm(anchor - right) else "right"
        )
        answered = answer(client, slug, rater, shown["query_id"], choice)
        assert answered.status_code == 200, answered.text
        state = answered.json()
    return state


def _two_arms(client, auth, project_id, per_rater: int, at_random: str, actively: str):
    """Arms `at_random` (random_share 1) and `actively` (the study's), no checks."""
    configure(
        client,
        auth,
        project_id,
        attention_rate=0,
        answers_per_rater=per_rater,
        arms=[{"name": at_random, "random_share": 1}, {"name": actively}],
    )


def test_an_arm_asked_at_random_never_gets_a_builds_queries(app, client, auth, study, blobs):
    project_id, slug, keys = study
    X, _ = blobs
    position = {key: number for number, key in enumerate(keys)}
    _two_arms(client, auth, project_id, 30, "asked at random", "asked actively")
    arms = client.get(f"{API}/projects/{project_id}/rating", headers=auth).json()["arms"]
    assert arms[0]["random_share"] == 1 and arms[1]["random_share"] is None
    start_build(client, auth, project_id, n_trees=1, random_state=0)
    raters = {}
    for _ in range(4):
        rater, state = join(client, slug)
        state = _answer_truly(client, slug, rater, state, X, position, 30)
        assert state["complete"]
        raters.setdefault(state["arm"], []).append(rater)
    assert sorted(raters) == ["asked actively", "asked at random"]
    with app.state.session_factory() as session:
        purposes = session.query(Assignment.purpose, Assignment.rater_id).all()
        arm_of = {
            rater_id: arm
            for rater_id, arm in session.execute(
                text("SELECT id, arm FROM raters WHERE project_id = :p"),
                {"p": project_id},
            )
        }
    asked = {arm: {Purpose(p) for p, r in purposes if arm_of[r] == arm} for arm in raters}
    # Random questions, some repeated to other raters (the noise ceiling's): never a build's.
    assert Purpose.random in asked["asked at random"]
    assert asked["asked at random"] <= {Purpose.random, Purpose.repeat}
    assert Purpose.build in asked["asked actively"]


def test_the_gain_is_measured_per_arm_on_common_held_out_answers(app, client, auth, study, blobs):
    project_id, slug, keys = study
    X, _ = blobs
    position = {key: number for number, key in enumerate(keys)}
    _two_arms(client, auth, project_id, 50, "random", "active")
    # The scheduler's draws seeded: an interval's 95 % is not a test's (it would miss
    # "no gain" in one run of twenty).
    app.state.scheduler_random = random.Random(57)
    model = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={"name": "map", "kind": "tete", "auto_refit": False, "params": {"n_components": 2}},
    ).json()
    gain_url = f"{API}/projects/{project_id}/models/{model['id']}/gain"
    # Nothing to measure before a version is fitted; a kind without distances is refused.
    early = client.get(gain_url, headers=auth).json()
    assert early["status"] == "unavailable" and "no ready version" in early["why"]
    forest = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={"name": "forest", "kind": "disdf", "auto_refit": False},
    ).json()
    refused = client.get(f"{API}/projects/{project_id}/models/{forest['id']}/gain", headers=auth)
    assert refused.status_code == 400
    assert "t-ETE, choice model and TripletBoost models" in refused.json()["detail"]
    boost = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={"name": "boost", "kind": "tripletboost", "auto_refit": False},
    ).json()

    for _ in range(8):  # 4 raters an arm, 50 answers each: no sampler runs, so the
        rater, state = join(client, slug)  # active arm too is asked at random
        _answer_truly(client, slug, rater, state, X, position, 50)
    for fitted in (model, boost):
        url = f"{API}/projects/{project_id}/models/{fitted['id']}/train"
        assert client.post(url, headers=auth).status_code == 202
    _run_jobs(app)
    asked = client.get(gain_url, headers=auth).json()
    assert asked["status"] == "queued" and asked["version"] == 1
    again = client.get(gain_url, headers=auth).json()  # asked twice: measured once
    assert again["status"] == "queued"
    _run_jobs(app)
    found = client.get(gain_url, headers=auth)
    assert found.status_code == 200, found.text
    gain = found.json()
    assert gain["status"] == "ready" and gain["current"] is True
    assert gain["measure"] == "heldout_triplet_error" and gain["answers"] == 400
    # Every fit keeps the loss the version chose (its dimension was given): the curves
    # differ by their answers only.
    metrics = client.get(f"{gain_url.removesuffix('/gain')}/versions/1", headers=auth).json()[
        "metrics"
    ]
    chosen = metrics["loss"] if metrics["loss"] in LOSS_NAMES else metrics["t"]
    assert gain["fixed"] == {"t": chosen}
    assert 20 <= gain["heldout"] <= 0.2 * 400 + 1
    random_arm, active_arm = gain["arms"]
    assert (random_arm["name"], random_arm["asking"]) == ("random", "random")
    assert (active_arm["name"], active_arm["asking"]) == ("active", "active")
    assert random_arm["gain"] is None
    for arm in gain["arms"]:
        counts = [point["answers"] for point in arm["curve"]]
        assert counts == sorted(counts) and counts[-1] == arm["answers"] and len(counts) >= 3
        errors = [point["error"] for point in arm["curve"]]
        assert errors[-1] < errors[0]  # more answers, a better map
        assert all(p["low"] <= p["error"] <= p["high"] for p in arm["curve"])
    figure = active_arm["gain"]
    assert figure["against"] == "random"
    # Compared where the random arm reaches (it gave the held-out answers).
    assert figure["answers"] == min(active_arm["answers"], random_arm["answers"])
    # Both arms asked at random: the random arm needs about as many answers, and the
    # interval holds "no gain".
    assert figure["low"]["answers"] <= figure["answers"] <= figure["high"]["answers"]
    assert 0.4 < figure["ratio"] < 2.5
    with app.state.session_factory() as session:
        jobs = session.execute(
            text("SELECT count(*) FROM jobs WHERE kind = 'active_gain'")
        ).scalar()
    assert jobs == 1

    # TripletBoost's gain is in labels: its error on the test split's 8 labelled items.
    boost_url = f"{API}/projects/{project_id}/models/{boost['id']}/gain"
    assert client.get(boost_url, headers=auth).json()["status"] == "queued"
    _run_jobs(app)
    labels = client.get(boost_url, headers=auth).json()
    assert labels["status"] == "ready" and labels["measure"] == "test_label_error"
    assert labels["heldout"] == 8
    random_arm, active_arm = labels["arms"]
    assert random_arm["answers"] + active_arm["answers"] == 400  # nothing held out
    assert all(0 <= point["error"] <= 1 for arm in labels["arms"] for point in arm["curve"])
    assert active_arm["gain"]["against"] == "random"


def test_a_study_without_an_arm_asked_at_random_says_what_to_set(client, auth, study):
    project_id, _, _ = study
    model = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={"name": "map", "kind": "tete", "auto_refit": False},
    ).json()
    gain_url = f"{API}/projects/{project_id}/models/{model['id']}/gain"
    unarmed = client.get(gain_url, headers=auth).json()
    assert unarmed["status"] == "unavailable" and "random_share of 1" in unarmed["why"]
    wrong = client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"arms": [{"name": "a"}, {"name": "b", "random_share": 1.5}]},
    )
    assert wrong.status_code == 422 and "random_share" in wrong.text
    configure(client, auth, project_id, arms=[{"name": "a", "random_share": 1}, {"name": "b"}])
    armed = client.get(gain_url, headers=auth).json()
    assert armed["status"] == "unavailable" and "no ready version" in armed["why"]
