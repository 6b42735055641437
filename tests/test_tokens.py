"""Scoped tokens (issue 55): a token does what its scope allows, in its projects, until it
expires or is revoked; a token never outlives the token or browser that made it; and the
holes an independent probe found on 2026-12-01 stay closed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from app.auth.service import create_token, set_researcher_password
from app.core.db import unit_of_work
from app.models import ApiToken
from tests.support.workspace import page_csrf, sign_in_form, signed_in_browser

API = "/api/v1"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _token(app, scope: str = "admin", projects: list[int] | None = None, **more) -> str:
    with unit_of_work(app.state.session_factory) as session:
        return create_token(
            session=session,
            researcher_name="alice",
            scope=scope,
            project_ids=projects,
            token_name=f"{scope} token",
            **more,
        )


def _token_count(app) -> int:
    with unit_of_work(app.state.session_factory) as session:
        return session.scalar(select(func.count()).select_from(ApiToken))


def _made_on_tokens_page(browser, **fields) -> str:
    """The token the workspace's tokens page shows once, made with these fields."""
    made = browser.post(
        "/tokens", data={"csrf_token": page_csrf(browser, "/tokens"), "name": "mine", **fields}
    )
    assert made.status_code == 201, made.text
    return made.text.split('<code id="new-token">')[1].split("</code>")[0]


def test_a_leaked_token_does_not_outlive_its_revocation(app, client, auth, project):
    """The probe's hole: with a leaked token one signed in to the workspace, made a new
    token there, and kept it after the leaked one was revoked. Now every token made with
    it, directly or in a browser it signed in, and theirs, go with it."""
    leaked = _token(app)
    with TestClient(app) as thief:
        signed_in_browser(thief, token=leaked)
        from_the_page = _made_on_tokens_page(thief, scope="admin", reach="all")
        made = thief.post(
            f"{API}/tokens",
            json={"name": "stay in", "scope": "admin"},
            headers={"X-CSRF-Token": page_csrf(thief, "/tokens")},
        )
        assert made.status_code == 201, made.text
        from_the_browser = made.json()["token"]
        direct = client.post(
            f"{API}/tokens", json={"name": "direct", "scope": "admin"}, headers=_bearer(leaked)
        ).json()
        assert direct["made_by_token_id"] is not None
        grandchild = client.post(
            f"{API}/tokens", json={"scope": "read"}, headers=_bearer(direct["token"])
        ).json()["token"]
        minted = [from_the_page, from_the_browser, direct["token"], grandchild]
        for token in minted:
            assert client.get(f"{API}/projects", headers=_bearer(token)).status_code == 200

        listed = {t["prefix"]: t for t in client.get(f"{API}/tokens", headers=auth).json()}
        leaked_id = listed[leaked[:13]]["id"]
        assert client.delete(f"{API}/tokens/{leaked_id}", headers=auth).status_code == 204

        for token in [leaked, *minted]:
            refused = client.get(f"{API}/projects", headers=_bearer(token))
            assert refused.status_code == 401, token
            assert refused.json()["detail"] == "invalid or revoked token"
        assert thief.get("/", follow_redirects=False).headers["location"] == "/login"
        statuses = {
            t["prefix"]: t["status"] for t in client.get(f"{API}/tokens", headers=auth).json()
        }
        assert [statuses[token[:13]] for token in [leaked, *minted]] == ["revoked"] * 5
    assert client.get(f"{API}/projects/{project['id']}", headers=auth).status_code == 200


def test_a_browser_signed_in_with_a_token_that_is_not_admin_makes_no_tokens(app, client):
    """The probe's hole: a session opened with any token could mint tokens."""
    for scope in ("read", "write"):
        token = _token(app, scope)
        before = _token_count(app)
        with TestClient(app) as browser:
            signed_in_browser(browser, token=token)
            assert browser.get("/", follow_redirects=False).status_code == 200
            page = browser.get("/tokens")
            assert page.status_code == 403
            assert f"this token's scope is '{scope}'" in page.text
            csrf = page_csrf(browser, "/")
            assert (
                browser.post("/tokens", data={"csrf_token": csrf, "scope": "admin"}).status_code
                == 403
            )
            api = browser.post(
                f"{API}/tokens", json={"scope": "admin"}, headers={"X-CSRF-Token": csrf}
            )
            assert api.status_code == 403
            assert "'admin' token" in api.json()["detail"]
            assert "API tokens" not in browser.get("/").text.split("<main")[0]
        by_bearer = client.post(f"{API}/tokens", json={"scope": "read"}, headers=_bearer(token))
        assert by_bearer.status_code == 403
        assert _token_count(app) == before


def test_a_predict_token_serves_and_touches_nothing_else(app, client, auth, project):
    """The probe's hole: a token made for a predict client downloaded the participants'
    platform ids and the archive, moved the completion redirect, deleted a project and
    signed in to the workspace. (Every route, for every scope: tests/test_access_matrix.py.)"""
    predict = _bearer(_token(app, "predict", [project["id"]]))
    pid = project["id"]
    assert client.get(f"{API}/projects/{pid}/models", headers=predict).status_code == 200
    for method, path, body in [
        ("GET", f"/projects/{pid}/participants/export", None),
        ("GET", f"/projects/{pid}/archive", None),
        ("PATCH", f"/projects/{pid}/rating", {"completion_url": "https://elsewhere.example/"}),
        ("DELETE", f"/projects/{pid}", None),
        ("POST", "/tokens", {"scope": "predict"}),
        ("GET", "/projects", None),
    ]:
        refused = client.request(method, API + path, json=body, headers=predict)
        assert refused.status_code == 403, (method, path, refused.text)
        assert "this token's scope is 'predict'" in refused.json()["detail"]
    with TestClient(app) as browser:
        refused = sign_in_form(browser, token=predict["Authorization"].split()[1])
        assert refused.status_code == 400
        assert "A &#39;predict&#39; token does not sign in to the workspace" in refused.text
    rating = client.get(f"{API}/projects/{pid}/rating", headers=auth).json()
    assert rating["completion_url"] is None
    assert client.get(f"{API}/projects/{pid}", headers=auth).status_code == 200


def test_only_the_whole_account_changes_where_raters_are_sent(app, client, auth, project):
    """The probe's hole: any token pointed `completion_url` at another site, so every
    rater who finished was sent there. A write token changes every other setting, and
    may send the URLs as they are (the settings form does)."""
    pid = project["id"]
    write = _bearer(_token(app, "write"))
    rating = f"{API}/projects/{pid}/rating"
    for field in ("completion_url", "no_more_work_url", "screened_out_url"):
        moved = client.patch(rating, json={field: "https://elsewhere.example/"}, headers=write)
        assert moved.status_code == 403, moved.text
        assert moved.json()["detail"].startswith(f"{field}: where raters are sent")
    assert client.get(rating, headers=auth).json()["completion_url"] is None
    changed = client.patch(
        rating, json={"instructions": "Look closely.", "completion_url": None}, headers=write
    )
    assert changed.status_code == 200, changed.text
    admin = client.patch(rating, json={"completion_url": "https://lab.example/done"}, headers=auth)
    assert admin.status_code == 200
    same = client.patch(
        rating,
        json={"completion_url": "https://lab.example/done", "question": "Which?"},
        headers=write,
    )
    assert same.status_code == 200, same.text

    with TestClient(app) as browser:
        signed_in_browser(browser, token=write["Authorization"].split()[1])
        form = browser.get(f"/projects/{pid}/settings").text
        assert 'value="https://lab.example/done"' in form
        # Shown as it is, sent back as it is; the form leaves out deleting the project.
        assert re.search(r'id="completion_url"[^>]*readonly', form)
        assert "Deleting the project needs your password or an admin token" in form
        fields = {
            "csrf_token": page_csrf(browser, f"/projects/{pid}/settings"),
            "answers_per_rater": "40",
            "completion_code": client.get(rating, headers=auth).json()["completion_code"],
            "completion_url": "https://elsewhere.example/",
        }
        refused = browser.post(f"/projects/{pid}/settings", data=fields)
        assert refused.status_code == 403
        assert "completion_url: where raters are sent" in refused.text
    assert client.get(rating, headers=auth).json()["completion_url"] == "https://lab.example/done"


def test_a_token_limited_to_projects_finds_no_other(app, client, auth, project):
    """A token over project A lists A only, finds no other project (404, as for one that
    does not exist), makes no project and no token reaching further than itself."""
    other = client.post(f"{API}/projects", json={"name": "other"}, headers=auth).json()
    limited = _bearer(_token(app, "admin", [project["id"]]))
    listed = client.get(f"{API}/projects", headers=limited).json()
    assert [p["id"] for p in listed] == [project["id"]]
    missing = client.get(f"{API}/projects/{other['id']}", headers=limited)
    assert missing.status_code == 404 and missing.json()["detail"] == f"no project {other['id']}"
    assert client.get(f"{API}/projects/999", headers=limited).json() == {"detail": "no project 999"}
    made = client.post(f"{API}/projects", json={"name": "new"}, headers=limited)
    assert made.status_code == 403 and "over all of yours" in made.json()["detail"]
    wider = client.post(f"{API}/tokens", json={"scope": "read"}, headers=limited)
    assert wider.status_code == 403 and "cannot make a token" in wider.json()["detail"]
    elsewhere = client.post(
        f"{API}/tokens", json={"scope": "read", "projects": [other["id"]]}, headers=limited
    )
    assert elsewhere.status_code == 403
    narrower = client.post(
        f"{API}/tokens", json={"scope": "read", "projects": [project["id"]]}, headers=limited
    )
    assert narrower.status_code == 201, narrower.text
    assert narrower.json()["projects"] == [project["id"]]
    seen = {t["id"] for t in client.get(f"{API}/tokens", headers=limited).json()}
    everyone = {t["id"]: t for t in client.get(f"{API}/tokens", headers=auth).json()}
    unlimited = {i for i, t in everyone.items() if t["projects"] is None}
    assert seen and not seen & unlimited
    assert client.delete(f"{API}/tokens/{min(unlimited)}", headers=limited).status_code == 404

    client.delete(f"{API}/projects/{project['id']}", headers=auth)
    assert client.get(f"{API}/projects", headers=limited).json() == []


def test_an_expired_token_is_refused_and_says_so(app, client, auth):
    soon = datetime.now(UTC) + timedelta(days=1)
    made = client.post(
        f"{API}/tokens",
        json={"scope": "admin", "expires_at": soon.isoformat()},
        headers=auth,
    ).json()
    assert made["status"] == "live"
    expiring = _bearer(made["token"])
    child = client.post(f"{API}/tokens", json={"scope": "read"}, headers=expiring)
    assert child.status_code == 422 and "no later than that" in child.json()["detail"]
    with TestClient(app) as browser:
        signed_in_browser(browser, token=made["token"])
        assert browser.get("/", follow_redirects=False).status_code == 200
        with unit_of_work(app.state.session_factory) as session:
            session.execute(
                update(ApiToken)
                .where(ApiToken.id == made["id"])
                .values(expires_at=datetime.now(UTC) - timedelta(minutes=1))
            )
        refused = client.get(f"{API}/projects", headers=expiring)
        assert refused.status_code == 401
        assert refused.json()["detail"].startswith("this token expired at ")
        assert browser.get("/", follow_redirects=False).headers["location"] == "/login"
        again = sign_in_form(browser, token=made["token"])
        assert again.status_code == 400 and "That token expired at" in again.text
    statuses = {t["id"]: t["status"] for t in client.get(f"{API}/tokens", headers=auth).json()}
    assert statuses[made["id"]] == "expired"


def test_signing_out_everywhere_revokes_the_tokens_made_in_those_browsers(app, client):
    """Someone who got into a browser session may have made a token to stay in; tokens
    made otherwise (a script's, from closer create-token) stay."""
    with unit_of_work(app.state.session_factory) as session:
        set_researcher_password(session=session, email="ada@lab.example", password="a passphrase!")
        scripted = create_token(session=session, researcher_name="ada@lab.example")
    with TestClient(app) as laptop, TestClient(app) as stolen:
        for browser in (laptop, stolen):
            signed_in_browser(browser, email="ada@lab.example", password="a passphrase!")
        kept_in = _made_on_tokens_page(stolen, scope="admin", reach="all")
        page = laptop.get("/tokens").text
        assert "The 1 token made in these browsers is revoked with them" in page
        laptop.post("/logout/everywhere", data={"csrf_token": page_csrf(laptop, "/tokens")})
        assert client.get(f"{API}/projects", headers=_bearer(kept_in)).status_code == 401
        assert client.get(f"{API}/projects", headers=_bearer(scripted)).status_code == 200
        signed_in_browser(laptop, email="ada@lab.example", password="a passphrase!")
        made_here = _made_on_tokens_page(laptop, scope="read", reach="all")
        laptop.post("/logout", data={"csrf_token": page_csrf(laptop, "/tokens")})
        # Signing this browser out is not a revocation: the token made in it stays.
        assert client.get(f"{API}/projects", headers=_bearer(made_here)).status_code == 200


def test_the_tokens_page_makes_a_scoped_limited_expiring_token(app, client, auth, project):
    other = client.post(f"{API}/projects", json={"name": "other"}, headers=auth).json()
    with unit_of_work(app.state.session_factory) as session:
        set_researcher_password(
            session=session, email="alice@lab.example", password="a passphrase!", name="alice"
        )
    with TestClient(app) as browser:
        signed_in_browser(browser, email="alice@lab.example", password="a passphrase!")
        plain = _made_on_tokens_page(
            browser, scope="read", reach="some", projects=str(project["id"]), expires="2099-01-31"
        )
        page = browser.get("/tokens").text
        assert "made in a browser signed in now" in page
        refused = browser.post(
            "/tokens", data={"csrf_token": page_csrf(browser, "/tokens"), "reach": "all"}
        )
        assert refused.status_code == 422
        assert "Choose what the token may do" in refused.text
        refused = browser.post(
            "/tokens",
            data={"csrf_token": page_csrf(browser, "/tokens"), "scope": "read", "reach": "some"},
        )
        assert "Tick the projects the token may touch" in refused.text
    token = next(
        t for t in client.get(f"{API}/tokens", headers=auth).json() if t["prefix"] == plain[:13]
    )
    assert token["scope"] == "read" and token["projects"] == [project["id"]]
    assert token["expires_at"].startswith("2099-01-31T23:59:59")
    assert token["made_in_browser"] is True
    read = _bearer(plain)
    assert client.get(f"{API}/projects/{project['id']}/items", headers=read).status_code == 200
    assert client.get(f"{API}/projects/{other['id']}/items", headers=read).status_code == 404
    changed = client.patch(f"{API}/projects/{project['id']}", json={"name": "x"}, headers=read)
    assert changed.status_code == 403


def test_bad_token_requests_say_what_is_wrong_and_make_nothing(app, client, auth, new_token):
    mallory = new_token("mallory")
    theirs = client.post(f"{API}/projects", json={"name": "mallory's"}, headers=mallory).json()
    before = _token_count(app)
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    for body, expected in [
        ({"scope": "root"}, "scope"),
        ({"name": "no scope"}, "scope"),
        ({"scope": "read", "projects": [theirs["id"]]}, f"no project {theirs['id']} of yours"),
        ({"scope": "read", "projects": []}, "projects"),
        ({"scope": "read", "projects": ["1"]}, "projects"),
        ({"scope": "read", "expires_at": past}, "has passed already"),
        ({"scope": "read", "expires_at": "2099-01-01T00:00:00"}, "expires_at"),
        ({"scope": "read", "expires_at": "next week"}, "expires_at"),
        ({"scope": "read", "name": "x" * 101}, "name"),
        ({"scope": "read", "role": "owner"}, "role"),
    ]:
        refused = client.post(f"{API}/tokens", json=body, headers=auth)
        assert refused.status_code == 422, (body, refused.text)
        assert expected in str(refused.json()["detail"]), (body, refused.text)
    assert client.delete(f"{API}/tokens/999", headers=auth).status_code == 404
    assert _token_count(app) == before
