"""What a stranger or a careless client can send: bodies are bounded before anyone is
authenticated, and malformed JSON is a 4xx that repeats little of the input (issue 15)."""

from __future__ import annotations

import json

import pytest

from tests.support.links import open_link
from tests.support.workspace import signed_in_page_csrf

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
            content=f'{{"random_share": {value}}}',
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
    return open_link(client, auth, project["id"])["public_slug"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        # Another port of this host, or a sibling subdomain (issue 32, hole 7).
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://testserver:8081"},
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


def test_a_page_loads_its_scripts_from_this_site_whatever_the_host_header(client, study_slug):
    """Issue 32, hole 13: `Host: evil.example` made the pages write
    `href="http://evil.example/static/…"`; a cache in front would serve them to everyone."""
    for path in ("/", "/login", f"/r/{study_slug}", "/docs", "/redoc"):
        page = client.get(path, headers={"Host": "evil.example"})
        assert page.status_code == 200, path
        assert "evil.example" not in page.text, path
        assert 'href="/static/css/closer.css"' in page.text or "/static/vendor/" in page.text


def test_every_response_carries_the_security_headers(client):
    for path in ("/", f"{API}/health", "/r/no-such-study", "/favicon.ico", "/openapi.json"):
        response = client.get(path)
        assert response.headers["x-content-type-options"] == "nosniff", path
        assert response.headers["referrer-policy"] == "same-origin", path
        policy = response.headers["content-security-policy"]
        assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy, path
    docs = client.get("/docs").headers["content-security-policy"]
    assert "frame-ancestors 'none'" in docs  # its CDN assets stay allowed until served here


def _json(client, method, url, body, headers):
    return client.request(
        method, url, content=body, headers={**headers, "Content-Type": "application/json"}
    )


@pytest.mark.parametrize(
    "path",
    [
        "/projects/2147483648",
        "/projects/9223372036854775808/builds",
        "/projects/1/models/99999999999999999999999",
        "/projects/1/models/1/versions/2147483648",
        "/projects/1/items?offset=9223372036854775808",
        "/projects/1/models/1/embedding?version=2147483648",
    ],
)
def test_an_id_the_database_cannot_hold_is_a_422(client, auth, path):
    response = client.get(API + path, headers=auth)
    assert response.status_code == 422, response.text
    assert "less than or equal to" in response.text


def test_a_rater_form_with_an_impossible_query_id_is_refused(client, study_slug):
    client.post(f"/r/{study_slug}/start", data={"participant": "p"})
    for query_id in ("9223372036854775808", "1" * 5000):
        response = client.post(
            f"/r/{study_slug}/answer",
            data={"query_id": query_id, "choice": "left", "response_time_ms": "9" * 5000},
        )
        assert response.status_code == 422, response.text


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('{"name": "a\\u0000b"}', "NUL character"),
        ('{"name": "p", "description": "x' + "\\u0000" + '"}', "NUL character"),
        ('{"name": "p", "n": ' + "7" * 4400 + "}", "4400 digits"),
        ('{"name": "p", "n": 9223372036854775808}', "out of range"),
        ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    ],
)
def test_text_and_numbers_no_column_can_hold_are_a_422(client, auth, body, named):
    response = _json(client, "POST", f"{API}/projects", body, auth)
    assert response.status_code == 422 and named in response.text, response.text[:300]
    assert len(response.content) < 600
    assert client.get(f"{API}/projects", headers=auth).json() == []


def test_a_nul_in_the_url_or_a_form_is_a_400(client, auth, study_slug):
    assert client.get(f"{API}/projects/1/items/a%00b", headers=auth).status_code == 400
    assert client.get(f"{API}/projects?x=%00", headers=auth).status_code == 400
    response = client.post(f"/r/{study_slug}/start", data={"participant": "a\x00b"})
    assert response.status_code == 400 and "NUL" in response.text


def _upload(client, auth, project, kind, name, data):
    return client.post(
        f"{API}/projects/{project['id']}/{kind}", headers=auth, files={"file": (name, data)}
    )


def test_uploads_with_nul_characters_are_refused_whole(client, auth, project):
    response = _upload(client, auth, project, "items", "i.csv", "key,text\na,fine\nb,x\x00y\n")
    assert response.status_code == 422 and "row 3" in response.text and "NUL" in response.text
    response = _upload(
        client, auth, project, "items", "i.json", '[{"key": "a"}, {"key": "b\\u0000"}]'
    )
    assert response.status_code == 422 and "row 2" in response.text
    assert client.get(f"{API}/projects/{project['id']}/items", headers=auth).json()["total"] == 0


@pytest.fixture
def four_items(client, auth, project):
    rows = "key\na\nb\nc\nd\n"
    assert _upload(client, auth, project, "items", "i.csv", rows).status_code == 201
    return project


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ("[" * 100_000 + "]" * 100_000, "row 1"),
        ('[["a", "b", "c"], ' + "[" * 100_000 + "]" * 100_000 + "]", "row 2"),
        ('[["a", "b", ' + "1" * 4400 + "]]", "in entry 1"),
        ('{"triplets": [["a", "b", "c"]], "extra": 1}', "found the field 'extra'"),
        ('{"triplets": 3}', "must be a JSON array"),
        ('[["a", "b", "c"], ["a", "b"', "not valid JSON in entry 2"),
        ('{"extra": 1, "triplets": [["a", "b", "c"]]}', "found the field 'extra'"),
        ("{}", "expected a JSON array of triplets"),
    ],
)
def test_a_malformed_json_upload_is_a_short_422(client, auth, four_items, document, named):
    response = _upload(client, auth, four_items, "triplets", "t.json", document)
    assert response.status_code == 422 and named in response.text, response.text[:400]
    assert len(response.content) < 1000
    assert (
        client.get(f"{API}/projects/{four_items['id']}", headers=auth).json()["triplet_count"] == 0
    )


@pytest.mark.parametrize(
    "moment", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00", "10000-01-01"]
)
def test_a_created_at_beyond_the_calendar_is_a_422(client, auth, four_items, moment):
    rows = f"anchor,closer,farther,created_at\na,b,c,{moment}\n"
    response = _upload(client, auth, four_items, "triplets", "t.csv", rows)
    assert response.status_code == 422, response.text
    assert "row 2, column 'created_at'" in response.text


def test_a_model_update_cannot_null_a_setting(client, auth, four_items):
    project_id = four_items["id"]
    model = client.post(
        f"{API}/projects/{project_id}/models",
        json={"name": "m", "kind": "tete", "train": False},
        headers=auth,
    ).json()
    response = client.patch(
        f"{API}/projects/{project_id}/models/{model['id']}",
        json={"auto_refit": True, "min_answers": None},
        headers=auth,
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "min_answers"]


def test_a_model_names_no_build_of_another_project(client, auth, new_token, four_items):
    other = new_token("mallory")
    theirs = client.post(f"{API}/projects", json={"name": "theirs"}, headers=other).json()
    _upload(client, other, theirs, "items", "i.csv", "key,label\na,x\nb,x\nc,y\nd,y\n")
    build = client.post(f"{API}/projects/{theirs['id']}/builds", json={}, headers=other)
    assert build.status_code == 201, build.text
    build = build.json()
    mine = f"{API}/projects/{four_items['id']}/models"
    for kind, status in (("comprf", 404), ("tete", 400), ("tripletboost", 400)):
        body = {"name": kind, "kind": kind, "build_id": build["id"], "train": False}
        response = client.post(mine, json=body, headers=auth)
        assert response.status_code == status, response.text
    response = client.post(mine, json={"name": "c", "kind": "comprf"}, headers=auth)
    assert response.status_code == 400 and "name it" in response.text
    assert client.get(mine, headers=auth).json() == []


def test_a_made_up_rater_token_is_refused_without_a_lookup(app, client, study_slug):
    joined = client.post(f"{API}/rate/{study_slug}/raters", json={}).json()
    token = joined["rater_token"]
    assert client.get(f"{API}/rate/{study_slug}/next", headers={"X-Rater-Token": token}).is_success
    raw = token.rsplit(".", 1)[0]
    for forged in (raw, raw + ".AAAA", "x" * 5000):
        response = client.get(f"{API}/rate/{study_slug}/next", headers={"X-Rater-Token": forged})
        assert response.status_code == 401


def test_study_links_come_from_the_configured_address(settings, client, auth, project):
    settings.public_url = "https://closer.example.org/studies"
    rating = client.get(
        f"{API}/projects/{project['id']}/rating", headers={**auth, "Host": "evil.example"}
    ).json()
    assert rating["public_url"] == f"https://closer.example.org/studies/r/{rating['public_slug']}"


def test_the_rater_cookie_is_secure_behind_https(settings, client, study_slug):
    response = client.post(f"/r/{study_slug}/start", data={}, follow_redirects=False)
    assert "secure" not in response.headers["set-cookie"].lower()
    settings.public_url = "https://closer.example.org"
    response = client.post(f"/r/{study_slug}/start", data={}, follow_redirects=False)
    cookie = response.headers["set-cookie"].lower()
    assert "secure" in cookie and "httponly" in cookie and "samesite=lax" in cookie


def test_the_api_docs_can_be_turned_off(settings):
    from fastapi.testclient import TestClient

    from app.main import create_app

    settings.api_docs = False
    with TestClient(create_app(settings)) as client:
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert client.get(path).status_code == 404


def test_a_locked_database_is_a_503_to_retry_not_a_500(database_url, settings, study_slug):
    """Issue 15, hole 8: while another writer holds SQLite's write lock past the wait, a
    request is told to come back (503, Retry-After), and comes back successfully."""
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite's write lock")
    import sqlite3

    from fastapi.testclient import TestClient

    from app.main import create_app

    settings.sqlite_busy_seconds = 0.2
    path = database_url.removeprefix("sqlite:///")
    with TestClient(create_app(settings)) as fresh:
        joined = fresh.post(f"{API}/rate/{study_slug}/raters", json={}).json()
        token = {"X-Rater-Token": joined["rater_token"]}
        state = fresh.get(f"{API}/rate/{study_slug}/next", headers=token).json()
        body = {"query_id": state["comparison"]["query_id"], "choice": "left"}
        writer = sqlite3.connect(path, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")  # a long upload, say
        try:
            busy = fresh.post(f"{API}/rate/{study_slug}/answers", headers=token, json=body)
            assert busy.status_code == 503, busy.text
            assert busy.headers["Retry-After"] == "2" and "try again" in busy.text
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        again = fresh.post(f"{API}/rate/{study_slug}/answers", headers=token, json=body)
        assert again.status_code == 200 and again.json()["answered"] == 1


def test_an_access_log_line_repeats_a_short_url(app, caplog):
    import logging

    access = logging.getLogger("uvicorn.access")
    target = "/api/v1/projects/" + "A" * 60_000
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", target, "1.1", 401)
    line = caplog.records[-1].getMessage()
    assert len(line) < 500 and "(60017 characters)" in line


def test_an_access_log_line_keeps_no_platform_id_nor_sign_in_key(app, caplog):
    """Issue 32, holes 12 and 13: the log kept `PROLIFIC_PID`, `participant` and the
    sign-in link's key of every request."""
    import logging

    access = logging.getLogger("uvicorn.access")
    targets = {
        "/r/study1?PROLIFIC_PID=5f1e2d&STUDY_ID=abc&participant=jane%40mail": (
            "/r/study1?PROLIFIC_PID=…&STUDY_ID=…&participant=…"
        ),
        "/login/link?key=MTIz.ZXhhbXBsZQ.c2lnbmF0dXJl": "/login/link?key=…",
        "/api/v1/projects/3/triplets/export?format=csv": (
            "/api/v1/projects/3/triplets/export?format=…"
        ),
        "/r/study1": "/r/study1",
    }
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        for target in targets:
            access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", target, "1.1", 200)
    lines = [record.getMessage() for record in caplog.records[-len(targets) :]]
    for line, logged in zip(lines, targets.values(), strict=True):
        assert f'"GET {logged} HTTP/1.1"' in line
    assert not any(secret in " ".join(lines) for secret in ("5f1e2d", "jane", "c2lnbmF0"))


def test_a_change_racing_a_delete_waits_for_it_instead_of_failing(
    app, client, auth, project, database_url
):
    """Issue 15, hole 6, and issue 32, hole 10: another request deletes the project while
    this one changes it. The deletion cannot come between this one's read and its write:
    a request that changes a project locks it from its first read (PostgreSQL: its row;
    SQLite: the database's write lock), so the deletion waits, then takes the project
    and the change along. (tests/test_projects.py races real requests.)"""
    import sqlalchemy.exc
    from sqlalchemy import create_engine, event, text

    sqlite = database_url.startswith("sqlite")
    if sqlite:
        other = create_engine(database_url, connect_args={"timeout": 0.2})
    else:
        other = create_engine(database_url, connect_args={"options": "-c lock_timeout=200"})
    waited = []

    def delete_meanwhile(session, _context, _instances):
        try:
            with other.begin() as connection:
                connection.execute(
                    text("DELETE FROM projects WHERE id = :id"), {"id": project["id"]}
                )
        except sqlalchemy.exc.OperationalError as locked:
            waited.append(type(locked.orig).__name__)

    event.listen(app.state.session_factory, "before_flush", delete_meanwhile, once=True)
    try:
        response = client.patch(
            f"{API}/projects/{project['id']}/rating", json={"instructions": "x"}, headers=auth
        )
    finally:
        other.dispose()
    assert waited == ["OperationalError" if sqlite else "LockNotAvailable"]
    assert response.status_code == 200, response.text
    assert client.delete(f"{API}/projects/{project['id']}", headers=auth).status_code == 204
    assert client.get(f"{API}/projects/{project['id']}", headers=auth).status_code == 404


def test_a_token_check_during_a_database_outage_is_no_500():
    """The body limit and the rate limits check a researcher's token before any route,
    where no handler turns an outage into a 503: there, an unverifiable token is simply
    not a researcher's (the route then answers 503 itself)."""
    import asyncio

    import psycopg
    import sqlalchemy.exc

    from app.core.limits import ResearcherTokens

    def database_down(_token):
        refused = psycopg.OperationalError("connection refused")
        raise sqlalchemy.exc.OperationalError("SELECT 1", {}, refused)

    assert asyncio.run(ResearcherTokens(database_down)("closer_x")) is False


@pytest.mark.parametrize(
    "params, named",
    [
        ("[" * 5000, "nested too deep"),
        ('{"n_components": 1' + "0" * 5000 + "}", "an integer of 5001 digits is out of range"),
        ('{"n_components": NaN}', "NaN is not a JSON number"),
    ],
)
def test_the_new_model_form_reads_params_as_the_api_does(client, auth, project, params, named):
    """Issue 32, hole 9: the form parsed `params` with plain json.loads, so 5,000 nested
    brackets (RecursionError) or a 5,000-digit integer answered 500. It now reads every
    form through one helper, which parses JSON as the API parses a body."""
    models = f"/projects/{project['id']}/models"
    csrf = signed_in_page_csrf(client, auth, models)
    form = {"csrf_token": csrf, "name": "hostile", "kind": "tete", "params": params}
    response = client.post(models, data=form)
    assert response.status_code == 422, response.text[:300]
    assert named in response.text
    assert client.get(f"/api/v1/projects/{project['id']}/models", headers=auth).json() == []
