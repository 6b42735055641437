"""What a crowd of strangers at a public link can take (issue 15, hole 2): joining leases
nothing, a first lease is short, and joins and answers are rate limited per address, per
study and per session, with a 429 that says when to come back, while honest raters and
the researcher's own tests go on unslowed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import Assignment, QuerySlot
from app.models._types import utcnow
from app.scheduling.service import FIRST_LEASE_SECONDS
from tests.test_rating import blobs, start_build, study  # noqa: F401 (fixtures)

API = "/api/v1"


@pytest.fixture
def settings(settings):
    settings.rate_limits = True
    settings.rate_limit_joins_per_address = "5/minute"
    settings.rate_limit_joins_per_study = "8/minute"
    settings.rate_limit_answers_per_session = "30/hour;3/minute"
    return settings


def _join(client, slug, **headers):
    return client.post(f"{API}/rate/{slug}/raters", json={}, headers=headers)


def _first(client, slug, token):
    return client.get(f"{API}/rate/{slug}/next", headers={"X-Rater-Token": token}).json()


def test_joins_are_limited_per_address_then_per_study(app, client, study):
    _, slug, _ = study
    for _ in range(5):
        assert _join(client, slug).status_code == 201
    refused = _join(client, slug)
    assert refused.status_code == 429
    assert "joins from this address (5 per 1 minute)" in refused.json()["detail"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    with TestClient(app, client=("203.0.113.7", 4000)) as elsewhere:
        for _ in range(3):
            assert _join(elsewhere, slug).status_code == 201
        refused = _join(elsewhere, slug)
        assert refused.status_code == 429 and "joins to this study" in refused.text


def test_the_page_says_when_to_come_back(client, study):
    _, slug, _ = study
    for _ in range(5):
        client.post(f"/r/{slug}/start", data={}, follow_redirects=False)
    page = client.post(f"/r/{slug}/start", data={}, follow_redirects=False)
    assert page.status_code == 429 and "Retry-After" in page.headers
    assert "text/html" in page.headers["content-type"] and "try again in" in page.text


def test_a_researchers_token_is_not_limited(client, auth, study):
    _, slug, _ = study
    for _ in range(12):
        assert _join(client, slug, **auth).status_code == 201


def test_a_fast_session_is_held_back_and_an_honest_one_is_not(app, client, study):
    _, slug, _ = study
    token = _join(client, slug).json()["rater_token"]
    with TestClient(app, client=("198.51.100.9", 4000)) as honest_client:
        honest = _join(honest_client, slug).json()["rater_token"]
        statuses = []
        state = _first(client, slug, token)
        for _ in range(6):
            response = client.post(
                f"{API}/rate/{slug}/answers",
                headers={"X-Rater-Token": token},
                json={"query_id": state["comparison"]["query_id"], "choice": "left"},
            )
            statuses.append(response.status_code)
            state = response.json() if response.status_code == 200 else state
        assert statuses[:3] == [200, 200, 200] and set(statuses[3:]) == {429}
        honest_state = _first(honest_client, slug, honest)
        response = honest_client.post(
            f"{API}/rate/{slug}/answers",
            headers={"X-Rater-Token": honest},
            json={"query_id": honest_state["comparison"]["query_id"], "choice": "left"},
        )
        assert response.status_code == 200


def test_joining_leases_nothing_and_a_first_lease_is_short(app, client, auth, study):
    project_id, slug, _ = study
    start_build(client, auth, project_id, n_trees=2, random_state=0)
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"random_share": 0, "attention_rate": 0, "lease_seconds": 600},
    )
    with app.state.session_factory() as session:
        assert session.scalar(select(QuerySlot.id).limit(1)) is not None  # the build asks
    tokens = [_join(client, slug, **auth).json()["rater_token"] for _ in range(10)]
    with app.state.session_factory() as session:
        leased = session.scalars(select(QuerySlot).where(QuerySlot.lease_rater_id.is_not(None)))
        assert list(leased) == []
        assert session.scalar(select(Assignment.id).limit(1)) is None
    before = utcnow()
    state = _first(client, slug, tokens[0])
    assert state["comparison"] is not None
    with app.state.session_factory() as session:
        slot = session.scalars(select(QuerySlot).where(QuerySlot.lease_rater_id.is_not(None))).one()
        lease = slot.lease_expires_at - before
        assert lease <= timedelta(seconds=FIRST_LEASE_SECONDS + 1)
    answered = client.post(
        f"{API}/rate/{slug}/answers",
        headers={"X-Rater-Token": tokens[0], **auth},
        json={"query_id": state["comparison"]["query_id"], "choice": "left"},
    ).json()
    assert answered["comparison"] is not None
    with app.state.session_factory() as session:
        held = session.get(Assignment, answered["comparison"]["query_id"])
        assert held.expires_at - utcnow() > timedelta(seconds=500)  # the study's 600 s


def _respellings(token: str) -> list[str]:
    """Other spellings of one signed token that a lenient base64 decoder reads alike:
    padding, and the last character's unused low bits set otherwise."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(token[-1])
    same_bits = [alphabet[(last & ~0b11) | low] for low in range(4)]
    return [token + "=", token + "==", token + "==="] + [
        token[:-1] + char for char in same_bits if char != token[-1]
    ]


def test_a_padded_rater_token_is_refused_and_cannot_reset_the_answer_limit(app, client, study):
    """Issue 32, hole 6: `TOKEN=`, `TOKEN==`, … authenticated as one session, each a key
    of its own to the per-session limit (3,151 answers in 10 s instead of 100)."""
    _, slug, _ = study
    token = _join(client, slug).json()["rater_token"]
    for other in _respellings(token):
        response = client.get(f"{API}/rate/{slug}/next", headers={"X-Rater-Token": other})
        assert response.status_code == 401, (other, response.text)
        client.cookies.set("closer_rater", other)
        page = client.get(f"/r/{slug}", follow_redirects=False)
        assert ">Start<" in page.text and ">Continue<" not in page.text, other  # a stranger
        client.cookies.clear()
    client.cookies.set("closer_rater", token)
    assert ">Continue<" in client.get(f"/r/{slug}").text  # the session itself
    client.cookies.clear()
    statuses = []
    state = _first(client, slug, token)
    for spelling in [token, *_respellings(token)]:
        response = client.post(
            f"{API}/rate/{slug}/answers",
            headers={"X-Rater-Token": spelling},
            json={"query_id": state["comparison"]["query_id"], "choice": "left"},
        )
        statuses.append(response.status_code)
        state = response.json() if response.status_code == 200 else state
    assert statuses[0] == 200 and set(statuses[1:]) == {401}, statuses
