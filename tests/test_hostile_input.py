"""What a stranger or a careless client can send: bodies are bounded before anyone is
authenticated, and malformed JSON is a 4xx that repeats little of the input (issue 15)."""

from __future__ import annotations

import json

import pytest

API = "/api/v1"
MIB = 1024 * 1024


def test_a_strangers_large_body_is_refused_before_it_is_read(client):
    body = json.dumps({"participant": "x" * (2 * MIB)})
    for url in (f"{API}/rate/no-such-study/raters", f"{API}/projects"):
        response = client.post(url, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 413, response.text
        assert "65536 bytes" in response.text and "researcher token" in response.text
        assert len(response.content) < 300


def test_a_strangers_chunked_body_is_cut_at_the_public_limit(client):
    def chunks():
        yield b'{"participant": "'
        for _ in range(64):  # 4 MiB, without a Content-Length
            yield b"x" * 65536
        yield b'"}'

    response = client.post(
        f"{API}/rate/no-such-study/raters",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413 and "65536 bytes" in response.text


def test_a_wrong_token_gets_no_more_than_a_stranger(client):
    body = json.dumps({"name": "x" * 200_000})
    response = client.post(
        f"{API}/projects",
        content=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer closer_nope"},
    )
    assert response.status_code == 413


def test_a_researchers_large_body_is_read_and_answered_briefly(client, auth):
    body = json.dumps({"name": "é" * 300_000})
    response = client.post(
        f"{API}/projects", content=body, headers={**auth, "Content-Type": "application/json"}
    )
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["loc"] == ["body", "name"] and error["input"].endswith("(300000 characters)")
    assert len(response.content) < 600  # the input is not sent back whole


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('{"name": NaN}', "NaN is not a JSON number"),
        ('{"name": "p", "description": Infinity}', "Infinity is not a JSON number"),
        ('{"name": -Infinity}', "-Infinity is not a JSON number"),
        ('{"name": 1e999}', "1e999 is out of range"),
    ],
)
def test_numbers_json_does_not_have_are_refused(client, auth, body, named):
    response = client.post(
        f"{API}/projects", content=body, headers={**auth, "Content-Type": "application/json"}
    )
    assert response.status_code == 422 and named in response.text


def test_non_finite_numbers_never_reach_the_settings(client, auth, project):
    for value in ("NaN", "Infinity", "1e400"):
        response = client.patch(
            f"{API}/projects/{project['id']}/rating",
            content='{"random_share": %s}' % value,
            headers={**auth, "Content-Type": "application/json"},
        )
        assert response.status_code == 422, response.text
    shares = client.get(f"{API}/projects/{project['id']}/rating", headers=auth).json()
    assert shares["random_share"] == 0.1


def test_a_lone_surrogate_is_a_422_not_a_500(client, auth):
    response = client.post(
        f"{API}/projects",
        content='{"name": "\\ud800"}',
        headers={**auth, "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "name"]


@pytest.fixture
def study_slug(client, auth, project):
    rows = "key,features\na,0 0\nb,1 1\nc,2 2\nd,3 3\n"
    client.post(
        f"{API}/projects/{project['id']}/items", headers=auth, files={"file": ("i.csv", rows)}
    )
    return client.get(f"{API}/projects/{project['id']}/rating", headers=auth).json()["public_slug"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
    ],
)
def test_another_sites_form_cannot_sign_a_visitor_into_a_study(app, client, study_slug, headers):
    """Login CSRF: a form on another site posting to the start route would replace the
    visitor's rater cookie with a session of the attacker's choosing."""
    from app.models import Rater

    response = client.post(
        f"/r/{study_slug}/start",
        data={"participant": "attacker"},
        headers=headers,
        follow_redirects=False,
    )
    assert response.status_code == 403 and "starts from its own page" in response.text
    assert "set-cookie" not in response.headers
    with app.state.session_factory() as session:
        assert session.query(Rater).count() == 0


def test_the_studys_own_page_starts_it(client, study_slug):
    for headers in ({"Sec-Fetch-Site": "same-origin"}, {"Origin": "http://testserver"}, {}):
        response = client.post(
            f"/r/{study_slug}/start",
            data={"participant": "me"},
            headers=headers,
            follow_redirects=False,
        )
        assert response.status_code == 303 and "closer_rater" in response.headers["set-cookie"]


def test_every_response_carries_the_security_headers(client):
    for path in ("/", f"{API}/health", "/r/no-such-study", "/favicon.ico", "/openapi.json"):
        response = client.get(path)
        assert response.headers["x-content-type-options"] == "nosniff", path
        assert response.headers["referrer-policy"] == "same-origin", path
        policy = response.headers["content-security-policy"]
        assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy, path
    docs = client.get("/docs").headers["content-security-policy"]
    assert "frame-ancestors 'none'" in docs  # its CDN assets stay allowed until served here
