"""What a crowd of strangers at a public link can take (issue 15, hole 2): joining leases
nothing, a first lease is short, and joins and answers are rate limited per address, per
study and per session, with a 429 that says when to come back, while honest raters and
the researcher's own tests go on unslowed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sklearn.datasets import make_blobs
from sqlalchemy import select

from app.core.db import unit_of_work
from app.models import Assignment, Purpose, QuerySlot, Rater
from app.models._types import utcnow
from app.raters.service import shed_idle_joins
from app.scheduling.service import FIRST_LEASE_SECONDS
from tests.support.rating import age_raters, blob_study, start_build

API = "/api/v1"


@pytest.fixture
def settings(settings):
    settings.rate_limits = True
    settings.rate_limit_joins_per_address = "5/minute"
    settings.rate_limit_joins_per_study = "8/minute"
    settings.rate_limit_answers_per_session = "30/hour;3/minute"
    return settings


@pytest.fixture
def study(client, auth, project):
    X, y = make_blobs(n_samples=60, centers=3, cluster_std=1.0, random_state=0)
    return blob_study(client, auth, project["id"], X, y)


def _join(client, slug, **headers):
    return client.post(f"{API}/rate/{slug}/raters", json={}, headers=headers)


def _first(client, slug, token):
    return client.get(f"{API}/rate/{slug}/next", headers={"X-Rater-Token": token}).json()


def test_joins_are_limited_per_address_then_per_study(app, client, study):
    """The study's limit counts an address's repeated joins only: an address's first
    join, an honest rater's, is never refused for what other addresses did."""
    _, slug, _ = study
    for _ in range(5):  # the first is free of the study's limit, 4 count towards it
        assert _join(client, slug).status_code == 201
    refused = _join(client, slug)
    assert refused.status_code == 429
    assert "joins from this address (5 per 1 minute)" in refused.json()["detail"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    with TestClient(app, client=("203.0.113.7", 4000)) as elsewhere:
        for _ in range(5):  # 4 more repeated joins: 8, the study's limit
            assert _join(elsewhere, slug).status_code == 201
    with TestClient(app, client=("203.0.113.8", 4000)) as third:
        assert _join(third, slug).status_code == 201  # its first
        refused = _join(third, slug)
        assert refused.status_code == 429 and "joins to this study" in refused.text
    with TestClient(app, client=("198.51.100.20", 4000)) as honest:
        assert _join(honest, slug).status_code == 201


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


def test_a_rater_holds_no_build_query_before_their_first_answer(app, client, auth, study):
    """Joining leases nothing, and neither does looking: a rater's first query is a
    random one; the build's queries come once they have answered."""
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
    firsts = [_first(client, slug, token) for token in tokens]
    assert all(state["comparison"] is not None for state in firsts)
    with app.state.session_factory() as session:
        leased = session.scalars(select(QuerySlot).where(QuerySlot.lease_rater_id.is_not(None)))
        assert list(leased) == []
        purposes = {a.purpose for a in session.scalars(select(Assignment))}
        assert purposes == {int(Purpose.random)}
        first = session.get(Assignment, firsts[0]["comparison"]["query_id"])
        assert first.expires_at - first.served_at <= timedelta(seconds=FIRST_LEASE_SECONDS + 1)
    answered = client.post(
        f"{API}/rate/{slug}/answers",
        headers={"X-Rater-Token": tokens[0], **auth},
        json={"query_id": firsts[0]["comparison"]["query_id"], "choice": "left"},
    ).json()
    with app.state.session_factory() as session:
        held = session.get(Assignment, answered["comparison"]["query_id"])
        assert held.slot_id is not None  # the build's query, now
        assert held.expires_at - utcnow() > timedelta(seconds=500)  # the study's 600 s


def test_a_join_flood_costs_the_flooder_not_the_crowd(app, client, auth, study):
    """Issue 32, hole 5: 1,200 joins a minute from 20 addresses used up the study's
    limit, so an honest rater from a fresh address got 429 every minute; each flooder
    session that looked at its first query leased a build query; each left a rater row.
    Now the flood leases nothing, an IPv6 /64 is one address, an honest rater gets in and
    gets the build's queries, and the flood's rows are shed once idle."""
    project_id, slug, _ = study
    start_build(client, auth, project_id, n_trees=2, random_state=0)
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"random_share": 0, "attention_rate": 0},
    )
    statuses = []
    for address in range(20):
        with TestClient(app, client=(f"198.18.0.{address + 1}", 4000)) as flooder:
            for _ in range(6):
                joined = _join(flooder, slug)
                statuses.append(joined.status_code)
                if joined.status_code == 201:
                    _first(flooder, slug, joined.json()["rater_token"])
    # Each address's first join, and repeated ones up to the study's limit (8).
    assert statuses.count(201) == 20 + 8 and statuses.count(429) == 120 - 28
    with TestClient(app, client=("2001:db8:1:2::1", 4000)) as first_of_a_network:
        assert _join(first_of_a_network, slug).status_code == 201
    again = []
    for host in range(2, 8):  # other addresses of the same /64: the same visitor again
        with TestClient(app, client=(f"2001:db8:1:2::{host}", 4000)) as same_network:
            refused = _join(same_network, slug)
            again.append((refused.status_code, refused.json()["detail"].split(" (")[0]))
    # Repeated joins, over the study's limit; then over the address's own: one /64.
    study, address = "too many joins to this study", "too many joins from this address"
    assert again == [(429, study)] * 4 + [(429, address)] * 2, again
    with app.state.session_factory() as session:
        leased = select(QuerySlot.id).where(QuerySlot.lease_rater_id.is_not(None))
        assert session.scalar(leased) is None  # the build's queries are all free

    with TestClient(app, client=("192.0.2.50", 4000)) as honest:
        joined = honest.post(f"{API}/rate/{slug}/raters", json={"participant": "p-honest"})
        assert joined.status_code == 201
        token = joined.json()["rater_token"]
        state = _first(honest, slug, token)
        answered = honest.post(
            f"{API}/rate/{slug}/answers",
            headers={"X-Rater-Token": token},
            json={"query_id": state["comparison"]["query_id"], "choice": "left"},
        ).json()
    with app.state.session_factory() as session:
        assert session.get(Assignment, answered["comparison"]["query_id"]).slot_id is not None

    with TestClient(app, client=("192.0.2.51", 4000)) as prolific:  # sent, yet to answer
        later = prolific.post(f"{API}/rate/{slug}/raters", json={"participant": "p-later"})
        assert later.status_code == 201
    age_raters(app, minutes=31)  # half an hour on
    with unit_of_work(app.state.session_factory) as session:
        shed = shed_idle_joins(session)
    with app.state.session_factory() as session:
        left = sorted(session.scalars(select(Rater.external_id)))
    # The flood's, the /64's one, and a platform's participant who did nothing more (who
    # comes back joins anew): what answered is kept.
    assert shed == 28 + 1 + 1
    assert left == ["p-honest"]


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


def test_a_session_sending_its_consent_over_and_over_is_held_back(client, auth, study):
    """The consent and the questionnaire count as the session's answers: a script that
    sends them in a loop is refused before it reaches the database."""
    project_id, slug, _ = study
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"consent": {"text": "Info", "statements": ["I agree."]}},
    ).raise_for_status()
    token = {"X-Rater-Token": _join(client, slug).json()["rater_token"]}
    statuses = [
        client.post(f"{API}/rate/{slug}/consent", headers=token, json={"agree": True}).status_code
        for _ in range(5)
    ]
    assert statuses[:3] == [200, 200, 200] and set(statuses[3:]) == {429}
    flooded = client.post(f"{API}/rate/{slug}/questionnaire", headers=token, json={"answers": {}})
    assert flooded.status_code == 429
