"""Bearer tokens: hashed at rest, owners see only their projects, admins see all."""

from sqlalchemy import select

from app.models import ApiToken


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
