"""A join flood from many addresses is bounded by the study's budget of new raters
(issue 55): anonymous newcomers take at most the share not kept for the participant ids
a recruiting platform sends, named ones the rest; a participant already in the study
joins again whatever the budget; and named joins that did nothing more are shed like
anonymous ones, so the participants list a researcher pays from holds none of them."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sklearn.datasets import make_blobs

from app.core.db import unit_of_work
from app.raters.service import shed_idle_joins
from tests.support.rating import age_raters, blob_study

API = "/api/v1"


@pytest.fixture
def settings(settings):
    settings.rate_limits = True
    settings.rate_limit_new_raters_per_study = "30/minute"
    settings.new_raters_reserved_for_platform_ids = 0.5
    return settings


def _join(app, slug: str, address: int, **body):
    with TestClient(app, client=(f"198.18.{address // 256}.{address % 256}", 4000)) as stranger:
        return stranger.post(f"{API}/rate/{slug}/raters", json=body)


def test_a_flood_of_new_raters_from_many_addresses_is_bounded_and_shed(app, client, auth, project):
    X, y = make_blobs(n_samples=30, centers=3, random_state=0)
    _, slug, _ = blob_study(client, auth, project["id"], X, y)
    anonymous = [_join(app, slug, n) for n in range(40)]
    assert [r.status_code for r in anonymous] == [201] * 15 + [429] * 25
    refused = anonymous[-1]
    assert "too many new anonymous raters of this study (15 per 1 minute)" in refused.text
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    # The platform's participants still find the places kept for them ...
    named = [_join(app, slug, 100 + n, participant=f"p{n}") for n in range(20)]
    assert [r.status_code for r in named] == [201] * 15 + [429] * 5
    assert "too many new raters of this study (30 per 1 minute)" in named[-1].text
    # ... and one who joined before comes back whatever the budget.
    assert _join(app, slug, 200, participant="p3").status_code == 201
    # The page's Start says the same, as a page.
    start = client.post(f"/r/{slug}/start", data={}, follow_redirects=False)
    assert start.status_code == 429  # in the rater's words, with the wait
    assert "Many people are joining right now: please try again in " in start.text

    token = named[0].json()["rater_token"]
    state = client.get(f"{API}/rate/{slug}/next", headers={"X-Rater-Token": token}).json()
    answered = client.post(
        f"{API}/rate/{slug}/answers",
        headers={"X-Rater-Token": token},
        json={"query_id": state["comparison"]["query_id"], "choice": "left"},
    )
    assert answered.status_code == 200, answered.text
    age_raters(app, minutes=31)  # half an hour on
    with unit_of_work(app.state.session_factory) as session:
        assert shed_idle_joins(session) == 15 + 14
    listed = client.get(f"{API}/projects/{project['id']}/participants", headers=auth).json()
    assert [p["participant"] for p in listed] == ["p0"]  # the one who answered


def test_newcomers_joining_at_once_never_take_more_than_the_budget():
    """Joins run on the web process's threads: however they interleave, a study's budget
    of new raters admits exactly its size (a test and a hit apart let each thread see the
    last place free)."""
    import sys
    import threading

    from app.core.throttle import Throttle, TooManyRequests

    async def never(request) -> bool:
        return False

    throttle = Throttle(
        joins_per_address="60/minute",
        joins_per_study="1200/minute",
        answers_per_session="10/second",
        new_raters_per_study="10/minute",
        reserved_for_platform_ids=0.0,
        is_researcher=never,
    )
    start = threading.Barrier(48)
    admitted: list[bool] = []

    def join() -> None:
        start.wait()
        try:
            throttle.newcomer("study", named=True)
            admitted.append(True)
        except TooManyRequests:
            admitted.append(False)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can
    try:
        threads = [threading.Thread(target=join) for _ in range(48)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert admitted.count(True) == 10 and len(admitted) == 48
