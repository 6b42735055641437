"""Bearer tokens: hashed at rest, owners see only their projects, admins see all; a
revoked token is refused at once everywhere."""

import subprocess
import sys

import httpx
import pytest
from sqlalchemy import select

from app.models import ApiToken
from tests.support.service import ROOT, ServiceProcesses, database_with_token
from tests.support.workspace import signed_in_browser


class TestTokens:
    def test_missing_token_is_401(self, client):
        response = client.get("/api/v1/projects")
        assert response.status_code == 401
        assert "Authorization" in response.json()["detail"]
        assert response.headers["www-authenticate"] == "Bearer"

    def test_wrong_token_is_401(self, client, auth):
        response = client.get("/api/v1/projects", headers={"Authorization": "Bearer closer_nope"})
        assert response.status_code == 401

    def test_token_is_stored_only_as_a_hash(self, app, auth):
        plain = auth["Authorization"].removeprefix("Bearer ")
        with app.state.session_factory() as session:
            stored = session.scalars(select(ApiToken)).all()
        assert len(stored) == 1
        assert stored[0].token_hash != plain and len(stored[0].token_hash) == 64
        assert plain not in stored[0].prefix or len(stored[0].prefix) < len(plain) // 2


class TestOwnership:
    def test_other_owners_project_is_404(self, client, new_token, project):
        bob = new_token("bob")
        assert client.get(f"/api/v1/projects/{project['id']}", headers=bob).status_code == 404
        assert client.get("/api/v1/projects", headers=bob).json() == []
        deleted = client.delete(f"/api/v1/projects/{project['id']}", headers=bob)
        assert deleted.status_code == 404
        export = client.get(f"/api/v1/projects/{project['id']}/triplets/export", headers=bob)
        assert export.status_code == 404

    def test_admin_sees_every_project(self, client, new_token, project):
        admin = new_token("root", admin=True)
        listed = client.get("/api/v1/projects", headers=admin).json()
        assert [p["id"] for p in listed] == [project["id"]]
        assert client.get(f"/api/v1/projects/{project['id']}", headers=admin).status_code == 200


@pytest.mark.slow  # two web processes of its own
def test_a_revoked_token_is_refused_at_once_by_every_web_process(postgres_server, tmp_path):
    """Two web processes on PostgreSQL: the token works on both, `closer revoke-token`
    revokes it, and from the next request on every process answers 401 (each looks
    the token up per request; the few seconds the body-limit check remembers a token
    only choose how much of a body to read, never who the caller is)."""
    if postgres_server is None:
        pytest.skip("needs the tests' own PostgreSQL server")
    url, token = database_with_token(postgres_server, "revoke_everywhere")
    service = ServiceProcesses(url, tmp_path / "data", web_processes=2, workers=0)
    service.start_web()
    try:
        bearer = {"Authorization": f"Bearer {token}"}
        answered = [
            httpx.get(f"{service.url}/api/v1/projects", headers=bearer).status_code
            for _ in range(20)
        ]
        assert answered == [200] * 20
        revoked = subprocess.run(
            [sys.executable, "-m", "app.cli", "revoke-token", token[:13]],
            env={**service.env, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert revoked.returncode == 0, revoked.stderr
        # New connections each time: uvicorn hands them to either process.
        refused = [
            httpx.get(f"{service.url}/api/v1/projects", headers=bearer).status_code
            for _ in range(40)
        ]
        assert refused == [401] * 40
        children = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(service.web.pid)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        assert len(children) >= 2  # the two web processes that answered
    finally:
        service.stop()


def test_a_sign_in_link_cut_short_or_changed_says_so_and_an_old_one_says_it_expired(
    app, client, monkeypatch
):
    import time

    from app.auth.service import ensure_researcher
    from app.core.db import unit_of_work

    with unit_of_work(app.state.session_factory) as session:
        admin_id = ensure_researcher(session=session, name="admin", admin=True).id
    cookies = app.state.workspace_cookies
    key = cookies.sign_in_link_key(admin_id)
    changed = key[:-1] + ("A" if key[-1] != "A" else "B")
    for broken in (key[:-4], changed, "nonsense"):
        refused = client.get(f"/login/link?key={broken}", follow_redirects=False)
        assert refused.status_code == 400
        assert "That sign-in link is not whole: it was cut short or changed" in refused.text
        assert "expired" not in refused.text
    day_old = int(time.time()) - 25 * 3600
    monkeypatch.setattr(cookies._link, "get_timestamp", lambda: day_old)
    old = cookies.sign_in_link_key(admin_id)
    monkeypatch.undo()
    refused = client.get(f"/login/link?key={old}", follow_redirects=False)
    assert refused.status_code == 400
    assert "That sign-in link has expired (a link lasts 24 hours)" in refused.text
    signed_in = client.get(f"/login/link?key={key}", follow_redirects=False)
    assert signed_in.status_code == 303


def test_a_sign_in_link_signs_in_once(app, client):
    """The console's link is as good as a password for a day: once used (even by two
    browsers at once), it is refused, and an older link with it."""
    from app.auth.service import ensure_researcher
    from app.core.db import unit_of_work

    with unit_of_work(app.state.session_factory) as session:
        admin_id = ensure_researcher(session=session, name="admin", admin=True).id
    key = app.state.workspace_cookies.sign_in_link_key(admin_id)
    first = client.get(f"/login/link?key={key}", follow_redirects=False)
    assert first.status_code == 303
    client.cookies.clear()
    again = client.get(f"/login/link?key={key}", follow_redirects=False)
    assert again.status_code == 400
    assert "That sign-in link has been used already: a link signs in once" in again.text
    assert client.get("/", follow_redirects=False).headers["location"] == "/login"


def test_a_new_password_and_sign_out_everywhere_end_every_browser_session(app, settings):
    """Browsers signed in with the old password are signed out by a new one; "Sign out
    everywhere" on the tokens page ends them all, this one too, and API tokens stay."""
    import re

    from fastapi.testclient import TestClient

    from app.auth.service import issue_token, set_researcher_password
    from app.core.db import unit_of_work

    with unit_of_work(app.state.session_factory) as session:
        ada, _ = set_researcher_password(
            session=session, email="ada@lab.example", password="an old passphrase"
        )
        token, _ = issue_token(session=session, researcher=ada)
    with TestClient(app) as laptop, TestClient(app) as lab:
        for browser in (laptop, lab):
            signed_in_browser(browser, email="ada@lab.example", password="an old passphrase")
            assert browser.get("/", follow_redirects=False).status_code == 200
        with unit_of_work(app.state.session_factory) as session:
            set_researcher_password(
                session=session, email="ada@lab.example", password="a new passphrase!"
            )
        for browser in (laptop, lab):
            assert browser.get("/", follow_redirects=False).headers["location"] == "/login"
            signed_in_browser(browser, email="ada@lab.example", password="a new passphrase!")
        page = laptop.get("/tokens").text
        assert "You are signed in on 2 browsers" in page
        csrf = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page).group(1)
        done = laptop.post("/logout/everywhere", data={"csrf_token": csrf}, follow_redirects=False)
        assert (
            done.status_code == 303 and done.headers["location"] == "/login?signed_out=everywhere"
        )
        assert "Signed out everywhere" in laptop.get(done.headers["location"]).text
        for browser in (laptop, lab):
            assert browser.get("/", follow_redirects=False).headers["location"] == "/login"
        api = laptop.get("/api/v1/projects", headers={"Authorization": f"Bearer {token}"})
        assert api.status_code == 200


def test_passwords_are_checked_a_few_at_a_time_and_the_rest_told_to_retry(app, monkeypatch):
    """Each password check takes 64 MiB: a burst of anonymous attempts is checked two at a
    time (the setting), and an attempt that cannot get a turn soon is told to retry
    (503, Retry-After), in the same words whether its email exists or not."""
    import re
    import threading
    import time

    from fastapi.testclient import TestClient

    from app.auth import service
    from app.core.db import unit_of_work

    with unit_of_work(app.state.session_factory) as session:
        service.set_researcher_password(
            session=session, email="ada@lab.example", password="a long passphrase"
        )
    app.state.password_checks.wait_seconds = 0.3
    running, most = [0], [0]
    lock = threading.Lock()
    verify = service._password_hash.verify_and_update

    def slow_verify(*args):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.5)  # as long as a check under memory pressure
        try:
            return verify(*args)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(service._password_hash, "verify_and_update", slow_verify)
    answers: list[tuple[str, int, str, str | None]] = []
    with TestClient(app) as browser:
        form = browser.get("/login").text
        csrf = re.search(r'name="csrf_token" value="([0-9a-f]+)"', form).group(1)
        start = threading.Barrier(8)

        def attempt(email):
            start.wait()
            response = browser.post(
                "/login",
                data={"email": email, "password": "a guess at it", "csrf_token": csrf},
                follow_redirects=False,
            )
            message = re.search(r'role="alert">([^<]*)<', response.text)
            answers.append(
                (email, response.status_code, message.group(1), response.headers.get("retry-after"))
            )

        emails = ["ada@lab.example", "nobody@lab.example"] * 4
        threads = [threading.Thread(target=attempt, args=(email,)) for email in emails]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert most[0] == 2
    busy = [a for a in answers if a[1] == 503]
    checked = [a for a in answers if a[1] == 400]
    assert len(busy) + len(checked) == 8 and busy and len(checked) >= 2
    assert {message for _, _, message, _ in busy} == {
        "Many sign-ins are being checked at this moment: try again in a few seconds."
    }
    assert {retry for *_, retry in busy} == {"2"}
    assert {message for _, _, message, _ in checked} == {"Wrong email or password."}
