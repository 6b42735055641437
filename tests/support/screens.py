"""A rater's screens through the API, one call each: settings, joining, the next screen,
an answer with picks, and the rows it left."""

from __future__ import annotations

from sqlalchemy import select

API = "/api/v1"


def set_rating(client, auth, project_id: int, **settings):
    return client.patch(f"{API}/projects/{project_id}/rating", headers=auth, json=settings)


def join_rater(client, slug: str) -> dict:
    joined = client.post(f"{API}/rate/{slug}/raters", json={})
    assert joined.status_code == 201, joined.text
    return {"X-Rater-Token": joined.json()["rater_token"]}


def next_screen(client, slug: str, token: dict) -> dict:
    state = client.get(f"{API}/rate/{slug}/next", headers=token)
    assert state.status_code == 200, state.text
    return state.json()["comparison"]


def answer_screen(client, slug: str, token: dict, query_id: int, **answer):
    return client.post(
        f"{API}/rate/{slug}/answers",
        headers=token,
        json={"query_id": query_id, "response_time_ms": 900, **answer},
    )


def rows_of(app, model, project_id: int) -> list:
    with app.state.session_factory() as session:
        return session.scalars(
            select(model).where(model.project_id == project_id).order_by(model.id)
        ).all()
