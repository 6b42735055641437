"""Bearer tokens: hashed at rest, owners see only their projects, admins see all; a
revoked token is refused at once everywhere."""

import subprocess
import sys

import httpx
import pytest
from sqlalchemy import select

from app.models import ApiToken
from tests.support.service import ROOT, ServiceProcesses, database_with_token


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
