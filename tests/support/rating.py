"""A study as its raters see it through the API: a study of labelled blobs with features,
joining, answering, and how a rater who sees the features answers."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from sqlalchemy import update

from app.core.db import unit_of_work
from app.models import Rater
from app.models._types import utcnow
from tests.support.links import open_link

API = "/api/v1"


def blob_study(client, auth, project_id: int, X, y):
    """Items with labels and 2-d features (the last fifth in the test split) and an open
    link: returns the project id, its public slug and the item keys in order."""
    test_from = len(X) * 4 // 5
    rows = ["key,label,split,features"] + [
        f"b{i},{y[i]},{'test' if i >= test_from else 'train'},{X[i, 0]} {X[i, 1]}"
        for i in range(len(X))
    ]
    response = client.post(
        f"{API}/projects/{project_id}/items",
        headers=auth,
        files={"file": ("blobs.csv", "\n".join(rows))},
    )
    assert response.status_code == 201, response.text
    slug = open_link(client, auth, project_id)["public_slug"]
    return project_id, slug, [f"b{i}" for i in range(len(X))]


def configure(client, auth, project_id, **settings):
    response = client.patch(f"{API}/projects/{project_id}/rating", headers=auth, json=settings)
    assert response.status_code == 200, response.text
    return response.json()


def join(client, slug, **ids):
    """Join, then ask for the first comparison: (token header, the state with it)."""
    response = client.post(f"{API}/rate/{slug}/raters", json=ids)
    assert response.status_code == 201, response.text
    assert response.json()["comparison"] is None  # joining serves (and leases) nothing
    token = {"X-Rater-Token": response.json()["rater_token"]}
    state = client.get(f"{API}/rate/{slug}/next", headers=token)
    assert state.status_code == 200, state.text
    return token, state.json()


def join_answered(client, slug, **ids):
    """Join and answer the first comparison, a random one (until their first answer a
    rater holds no build query): (token header, the state with the next comparison)."""
    rater, state = join(client, slug, **ids)
    answered = answer(client, slug, rater, state["comparison"]["query_id"])
    assert answered.status_code == 200, answered.text
    return rater, answered.json()


def answer(client, slug, rater, query_id, choice="left", **extra):
    return client.post(
        f"{API}/rate/{slug}/answers",
        headers=rater,
        json={"query_id": query_id, "choice": choice, **extra},
    )


def start_build(client, auth, project_id, **params):
    response = client.post(f"{API}/projects/{project_id}/builds", headers=auth, json=params)
    assert response.status_code == 201, response.text
    return response.json()


def check_answer(comparison, *, passing: bool) -> str:
    """The side an attention check's answer takes: the copy of the anchor to pass it,
    the other side to fail it."""
    anchor_on_left = comparison["left"]["key"] == comparison["anchor"]["key"]
    return "left" if anchor_on_left == passing else "right"


def oracle_choice(X, keys, comparison, noise_rng=None, noise=0.0):
    """How a rater who sees the features answers: the candidate nearer the anchor."""
    index = {key: i for i, key in enumerate(keys)}
    a, left, right = (index[comparison[role]["key"]] for role in ("anchor", "left", "right"))
    nearer_left = np.linalg.norm(X[a] - X[left]) < np.linalg.norm(X[a] - X[right])
    if noise_rng is not None and noise_rng.random() < noise:
        nearer_left = not nearer_left
    return "left" if nearer_left else "right"


def age_raters(app, minutes: float) -> None:
    """Every rater as if they joined, and were last seen, `minutes` ago."""
    with unit_of_work(app.state.session_factory) as session:
        then = utcnow() - timedelta(minutes=minutes)
        session.execute(update(Rater).values(created_at=then, last_seen_at=then))
