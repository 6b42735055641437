"""Projects through the REST API."""

import io
import zipfile

from PIL import Image
from sqlalchemy import func, select

from app.models import Item, Triplet


def png(color: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), color).save(buffer, "PNG")
    return buffer.getvalue()


class TestProjects:
    def test_create_list_get(self, client, auth):
        created = client.post(
            "/api/v1/projects",
            headers=auth,
            json={"name": "Faces", "description": "which face is closer?", "label_type": "number"},
        )
        assert created.status_code == 201
        body = created.json()
        assert body["name"] == "Faces" and body["label_type"] == "number"
        assert body["item_count"] == 0 and body["triplet_count"] == 0
        listed = client.get("/api/v1/projects", headers=auth).json()
        assert [p["name"] for p in listed] == ["Faces"]
        fetched = client.get(f"/api/v1/projects/{body['id']}", headers=auth).json()
        assert fetched["description"] == "which face is closer?"

    def test_invalid_body_names_the_field(self, client, auth):
        response = client.post("/api/v1/projects", headers=auth, json={"name": ""})
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "name"]
        response = client.post(
            "/api/v1/projects", headers=auth, json={"name": "x", "label_type": "colour"}
        )
        assert response.status_code == 422

    def test_unknown_project_is_404(self, client, auth):
        assert client.get("/api/v1/projects/999", headers=auth).status_code == 404

    def test_delete_removes_items_triplets_and_images(self, client, auth, project, app, settings):
        pid = project["id"]
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("manifest.csv", "key,image\na,a.png\nb,b.png\nc,c.png\n")
            for name, color in (("a", (255, 0, 0)), ("b", (0, 255, 0)), ("c", (0, 0, 255))):
                zf.writestr(f"{name}.png", png(color))
        up = client.post(
            f"/api/v1/projects/{pid}/items",
            headers=auth,
            files={"file": ("items.zip", archive.getvalue())},
        )
        assert up.status_code == 201, up.text
        client.post(
            f"/api/v1/projects/{pid}/triplets",
            headers=auth,
            files={"file": ("t.csv", "anchor,closer,farther\na,b,c\nb,c,a\n")},
        )
        media = settings.media_dir / str(pid)
        assert len(list(media.iterdir())) == 3

        assert client.delete(f"/api/v1/projects/{pid}", headers=auth).status_code == 204
        assert client.get(f"/api/v1/projects/{pid}", headers=auth).status_code == 404
        with app.state.session_factory() as session:
            assert session.scalar(select(func.count()).select_from(Item)) == 0
            assert session.scalar(select(func.count()).select_from(Triplet)) == 0
        assert not media.exists()


def test_a_write_whose_commit_fails_is_not_reported_as_success(app, auth, monkeypatch):
    from fastapi.testclient import TestClient
    from sqlalchemy.orm import Session

    def failing_commit(self):
        raise RuntimeError("disk full")

    monkeypatch.setattr(Session, "commit", failing_commit)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/api/v1/projects", json={"name": "lost"}, headers=auth)
    assert response.status_code == 500
    monkeypatch.undo()
    with TestClient(app) as client:
        assert client.get("/api/v1/projects", headers=auth).json() == []


def test_timestamps_are_utc_on_every_database(client, auth, project):
    from datetime import datetime

    created = datetime.fromisoformat(project["created_at"])
    assert created.utcoffset() is not None and created.utcoffset().total_seconds() == 0
    fetched = client.get(f"/api/v1/projects/{project['id']}", headers=auth).json()
    assert fetched["created_at"] == project["created_at"]


def test_the_rating_settings_are_listed_once():
    """RatingSettings is the one list: the update schema takes exactly its settings with
    the same checks, the settings page shows each once, and the projects table has a
    column for each that may be null exactly where the setting may be."""
    from app.models import Project
    from app.projects.schemas import (
        NULLABLE_RATING_SETTINGS,
        RatingSettings,
        RatingSettingsUpdate,
        rating_setting_sections,
    )

    names = set(RatingSettings.model_fields)
    assert set(RatingSettingsUpdate.model_fields) == names
    shown = [name for _, rows in rating_setting_sections() for name, _, _ in rows]
    assert sorted(shown) == sorted(names)
    columns = Project.__table__.columns
    assert {name: columns[name].nullable for name in names} == {
        name: name in NULLABLE_RATING_SETTINGS for name in names
    }
    for name, info in RatingSettings.model_fields.items():
        update = RatingSettingsUpdate.model_fields[name]
        assert [type(check) for check in update.metadata] == [
            type(check) for check in info.metadata
        ], name


def test_a_project_is_renamed_and_described_again_and_nothing_else_changes(client, auth, project):
    url = f"/api/v1/projects/{project['id']}"
    renamed = client.patch(url, headers=auth, json={"name": "Shapes, second wave"})
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == "Shapes, second wave"
    assert renamed.json()["description"] == project["description"]
    described = client.patch(url, headers=auth, json={"description": "Pilot with 40 raters"})
    assert described.json()["name"] == "Shapes, second wave"
    assert described.json()["description"] == "Pilot with 40 raters"
    for body, field in (
        ({"name": ""}, "name"),
        ({"name": None}, "name"),
        ({"owner_id": 2}, "owner_id"),
    ):
        refused = client.patch(url, headers=auth, json=body)
        assert refused.status_code in (400, 422), refused.text
        assert field in refused.text
    assert client.get(url, headers=auth).json()["name"] == "Shapes, second wave"


def test_requests_racing_a_project_deletion_get_404_or_409_never_a_server_error(client, auth):
    """A build started, a model trained and the project's settings changed while the
    project is being deleted: each request either lands before the deletion (which then
    takes it along) or finds no project; none fails with a 500 or a deadlock's 503."""
    import threading

    api = "/api/v1/projects"
    seen: dict[str, set[int]] = {"delete": set(), "build": set(), "train": set(), "rating": set()}
    unexpected: list = []
    for round_number in range(12):
        pid = client.post(api, headers=auth, json={"name": f"doomed {round_number}"}).json()["id"]
        items = "key,label\n" + "".join(f"k{i},{'ab'[i % 2]}\n" for i in range(12))
        client.post(f"{api}/{pid}/items", headers=auth, files={"file": ("i.csv", items)})
        answers = "anchor,closer,farther\n" + "".join(
            f"k{i},k{(i + 2) % 12},k{(i + 1) % 12}\n" for i in range(12)
        )
        client.post(f"{api}/{pid}/triplets", headers=auth, files={"file": ("t.csv", answers)})
        model = client.post(
            f"{api}/{pid}/models",
            headers=auth,
            json={"name": "m", "kind": "tripletboost", "train": False, "min_answers": 1},
        ).json()
        calls = {
            "delete": lambda: client.delete(f"{api}/{pid}", headers=auth),
            "build": lambda: client.post(
                f"{api}/{pid}/builds", headers=auth, json={"n_trees": 1, "random_state": 0}
            ),
            "train": lambda: client.post(f"{api}/{pid}/models/{model['id']}/train", headers=auth),
            "rating": lambda: client.patch(
                f"{api}/{pid}/rating", headers=auth, json={"instructions": "new"}
            ),
        }
        start = threading.Barrier(len(calls))
        statuses: dict[str, int] = {}

        def run(name, call):
            start.wait()
            response = call()
            statuses[name] = response.status_code
            if response.status_code not in (200, 201, 202, 204, 404, 409):
                unexpected.append((name, response.status_code, response.text[:300]))

        threads = [threading.Thread(target=run, args=item) for item in calls.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for name, status in statuses.items():
            seen[name].add(status)
        assert client.get(f"{api}/{pid}", headers=auth).status_code == 404
    assert unexpected == []
    assert seen["delete"] == {204}
    assert seen["build"] <= {201, 404, 409}, seen
    assert seen["train"] <= {202, 404, 409}, seen
    assert seen["rating"] <= {200, 404, 409}, seen
