"""A build answered through the API by a rater who sees the items' features."""

from __future__ import annotations

import json

import numpy as np

from app.builds.jobs import sweep
from app.learn import FeatureOracle
from app.worker.loop import Worker

API = "/api/v1"


def finished_build(app, client, auth, project_id: int, X, y):
    """A 3-tree build on 50 labelled items, answered by a feature oracle through the
    API; the rest are left unlabelled. Returns (project id, build id, keys)."""
    keys = [f"p{i}" for i in range(len(X))]
    rows = ["key,label,features"] + [
        f"{keys[i]},{y[i] if i < 50 else ''},{X[i, 0]} {X[i, 1]}" for i in range(len(X))
    ]
    uploaded = client.post(
        f"{API}/projects/{project_id}/items",
        headers=auth,
        files={"file": ("b.csv", "\n".join(rows))},
    )
    assert uploaded.status_code == 201, uploaded.text
    build = client.post(
        f"{API}/projects/{project_id}/builds", headers=auth, json={"n_trees": 3, "random_state": 1}
    ).json()
    answer_build(app, client, auth, project_id, build["id"], answering_oracle(X, keys))
    return project_id, build["id"], keys


def answer_build(app, client, auth, project_id: int, build_id: int, oracle) -> None:
    """Answer a build's queries through the API until it completes."""
    for _ in range(60):
        queries = client.get(
            f"{API}/projects/{project_id}/builds/{build_id}/queries?limit=100000", headers=auth
        ).json()
        if not queries:
            break
        answers = [oracle(q) for q in queries]
        upload = json.dumps([list(a) for a in answers])
        assert (
            client.post(
                f"{API}/projects/{project_id}/triplets",
                headers=auth,
                files={"file": ("answers.json", upload)},
            ).status_code
            == 201
        )
        sweep(app.state.session_factory)
        Worker(app.state.session_factory).run(until_idle=True)
    state = client.get(f"{API}/projects/{project_id}/builds/{build_id}", headers=auth).json()
    assert state["status"] == "complete"


def answering_oracle(X, keys):
    index = {key: i for i, key in enumerate(keys)}
    oracle = FeatureOracle(X)

    def answer(query):
        a, p, q = (index[query[role]] for role in ("anchor", "left", "right"))
        triplet = oracle.answer(np.array([[a, p, q]]))[0]
        return tuple(keys[i] for i in triplet)

    return answer
