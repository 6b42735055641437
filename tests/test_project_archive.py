"""A whole project as one ZIP, carried to a server on the other database (SQLite to
PostgreSQL and back): the new project's exports are the old one's, its build asks the
same queries, and a broken archive leaves nothing behind."""

from __future__ import annotations

import csv
import io
import json
import zipfile

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.auth.service import create_token
from app.core import migrations
from app.core.db import unit_of_work
from app.main import create_app
from app.worker.loop import Worker
from tests.support.links import open_link
from tests.support.rating import join, oracle_choice
from tests.support.uploads import png, zip_bytes

LINK_FIELDS = ("public_slug", "public_url", "link_state", "link_opened_at")

API = "/api/v1"


@pytest.fixture
def other_server(request, settings, make_database_url, tmp_path):
    """A second Closer on the other database, with a researcher of its own."""
    other = "postgresql" if settings.resolved_database_url.startswith("sqlite") else "sqlite"
    url = make_database_url(other, f"archive_{request.node.name[-8:-1]}")
    migrations.upgrade(url)
    target = create_app(
        settings.model_copy(update={"database_url": url, "data_dir": tmp_path / "lab"})
    )
    with TestClient(target) as client:
        with unit_of_work(target.state.session_factory) as session:
            token = create_token(session=session, researcher_name="lab")
        yield client, {"Authorization": f"Bearer {token}"}
    target.state.engine.dispose()


@pytest.fixture
def pilot(app, client, auth, project):
    """A pilot study: 36 items with images, features and labels; a CompRF build half way,
    answered by two raters (one excluded) and an uploaded batch; a t-ETE model and the
    build's CompRF model."""
    rng = np.random.default_rng(3)
    centres = np.array([[0, 0], [5, 0], [0, 5]])
    features = np.vstack([centres[i % 3] + rng.normal(0, 0.7, 2) for i in range(36)])
    rows = ["key,label,split,features,image"] + [
        f"s{i},c{i % 3},{'test' if i >= 30 else 'train'},{features[i, 0]:.4f} {features[i, 1]:.4f},"
        f"img/{i}.png"
        for i in range(36)
    ]
    archive = zip_bytes(
        {
            "manifest.csv": "\n".join(rows),
            **{f"img/{i}.png": png((7 * i, 255 - 5 * i, 90)) for i in range(36)},
        }
    )
    pid = project["id"]
    uploaded = client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("pilot.zip", archive)}
    )
    assert uploaded.status_code == 201, uploaded.text
    settings = client.patch(
        f"{API}/projects/{pid}/rating",
        headers=auth,
        json={"answers_per_rater": 0, "attention_rate": 0, "instructions": "Pick the nearer."},
    ).json()
    slug = open_link(client, auth, pid)["public_slug"]
    assert settings["answers_per_rater"] == 0
    build = client.post(
        f"{API}/projects/{pid}/builds",
        headers=auth,
        json={"n_trees": 2, "random_state": 4, "sort_size": 3},
    ).json()
    Worker(app.state.session_factory).run(until_idle=True)
    keys = [f"s{i}" for i in range(36)]
    for participant in ("ann", "bob"):
        rater, state = join(client, slug, participant=participant)
        for _ in range(25):
            comparison = state["comparison"]
            if comparison is None:
                break
            state = client.post(
                f"{API}/rate/{slug}/answers",
                headers=rater,
                json={
                    "query_id": comparison["query_id"],
                    **_answer(features, keys, comparison),
                    "response_time_ms": 900,
                },
            ).json()
        Worker(app.state.session_factory).run(until_idle=True)
    batch = "anchor,closer,farther\ns0,s3,s1\ns1,s4,s2\ns2,s5,s0\n"
    assert (
        client.post(
            f"{API}/projects/{pid}/triplets", headers=auth, files={"file": ("batch.csv", batch)}
        ).status_code
        == 201
    )
    raters = client.get(f"{API}/projects/{pid}/raters", headers=auth).json()
    bob = next(rater for rater in raters if rater["external_id"] == "bob")
    assert (
        client.patch(
            f"{API}/projects/{pid}/raters/{bob['id']}", headers=auth, json={"excluded": True}
        ).status_code
        == 200
    )
    Worker(app.state.session_factory).run(until_idle=True)
    for body in (
        {"name": "map", "kind": "tete", "params": {"n_components": 3}, "train": False},
        {"name": "choices", "kind": "choice", "params": {"n_components": 8}, "train": False},
        {"name": "forest", "kind": "comprf", "build_id": build["id"]},
    ):
        made = client.post(f"{API}/projects/{pid}/models", headers=auth, json=body)
        assert made.status_code == 201, made.text
    return pid, build["id"]


def _answer(features, keys, comparison) -> dict:
    """A triplet's choice, or a sorting screen's sides, as the features say."""
    if comparison["format"] == "triplet":
        return {"choice": oracle_choice(features, keys, comparison)}
    index = {key: i for i, key in enumerate(keys)}
    left, right = (features[index[pivot["key"]]] for pivot in comparison["pivots"])
    sides = []
    for item in comparison["items"]:
        x = features[index[item["key"]]]
        nearer_left = np.linalg.norm(x - left) < np.linalg.norm(x - right)
        sides.append({"key": item["key"], "side": "left" if nearer_left else "right"})
    return {"sides": sides}


def _numbered_in_order(text: str, column: str) -> str:
    """A CSV export with one column's ids numbered 1, 2, … in the order they first appear:
    ids are the database's own, the grouping they make is the project's."""
    rows = list(csv.reader(io.StringIO(text)))
    at = rows[0].index(column)
    numbers: dict[str, str] = {}
    for row in rows[1:]:
        if row[at]:
            row[at] = numbers.setdefault(row[at], str(len(numbers) + 1))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _exports(client, auth, pid, build_id) -> dict:
    """What a researcher would compare: every export, the settings, raters, build."""
    rating = client.get(f"{API}/projects/{pid}/rating", headers=auth).json()
    build = client.get(f"{API}/projects/{pid}/builds/{build_id}", headers=auth).json()

    def csv_export(path: str) -> str:
        return client.get(f"{API}/projects/{pid}/{path}", headers=auth).text

    return {
        "items_csv": client.get(f"{API}/projects/{pid}/items/export?format=csv", headers=auth).text,
        "items_json": client.get(
            f"{API}/projects/{pid}/items/export?format=json", headers=auth
        ).json(),
        "triplets_csv": _numbered_in_order(csv_export("triplets/export?format=csv"), "judgement"),
        "counted_csv": _numbered_in_order(
            csv_export("triplets/export?format=csv&raters=counted"), "judgement"
        ),
        "judgements_csv": _numbered_in_order(
            csv_export("judgements/export?format=csv"), "\ufeffjudgement"
        ),
        # A moved study gets a link of its own, closed until the researcher opens it there.
        "rating": {k: v for k, v in rating.items() if k not in LINK_FIELDS},
        "raters": sorted(
            (r["external_id"], r["answers"], r["excluded"], r["exclusion_override"])
            for r in client.get(f"{API}/projects/{pid}/raters", headers=auth).json()
        ),
        "build": (build["status"], build["params"], build["progress"]),
        "queries": client.get(
            f"{API}/projects/{pid}/builds/{build_id}/queries", headers=auth
        ).json(),
        "models": sorted(
            (m["name"], m["kind"], json.dumps(m["params"], sort_keys=True))
            for m in client.get(f"{API}/projects/{pid}/models", headers=auth).json()
        ),
    }


def test_a_project_moves_to_the_other_database_and_exports_the_same(
    app, client, auth, pilot, other_server
):
    pid, build_id = pilot
    before = _exports(client, auth, pid, build_id)
    assert before["build"][0] == "running" and before["queries"]  # half way
    assert before["triplets_csv"].count("\n") > 40
    assert before["judgements_csv"].count("\n") > 5  # the build's sorting screens
    assert before["counted_csv"].count("\n") < before["triplets_csv"].count("\n")

    download = client.get(f"{API}/projects/{pid}/archive", headers=auth)
    assert download.status_code == 200
    assert download.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(download.content)) as archive:
        assert sorted(archive.namelist()) == [
            f"builds/{build_id}.state",
            "items.zip",
            "judgements.json",
            "project.json",
            "triplets.csv",
        ]

    lab, lab_auth = other_server
    created = lab.post(
        f"{API}/project-archives",
        headers=lab_auth,
        files={"file": ("pilot.zip", download.content)},
    )
    assert created.status_code == 201, created.text
    moved = created.json()
    assert moved["name"] == "shapes" and moved["item_count"] == 36
    new_build = lab.get(f"{API}/projects/{moved['id']}/builds", headers=lab_auth).json()[0]
    assert new_build["params"]["sort_size"] == 3  # it asks on sorting screens there too
    after = _exports(lab, lab_auth, moved["id"], new_build["id"])
    for name, value in before.items():
        assert after[name] == value, name

    # And back again: the round trip changes nothing either.
    again = lab.get(f"{API}/projects/{moved['id']}/archive", headers=lab_auth)
    back = client.post(
        f"{API}/project-archives", headers=auth, files={"file": ("lab.zip", again.content)}
    )
    assert back.status_code == 201, back.text
    returned_build = client.get(f"{API}/projects/{back.json()['id']}/builds", headers=auth).json()
    assert _exports(client, auth, back.json()["id"], returned_build[0]["id"]) == before


def test_a_broken_archive_is_refused_and_leaves_nothing(app, client, auth, pilot, other_server):
    pid, _ = pilot
    download = client.get(f"{API}/projects/{pid}/archive", headers=auth).content
    with zipfile.ZipFile(io.BytesIO(download)) as archive:
        parts = {name: archive.read(name) for name in archive.namelist()}
    lab, lab_auth = other_server

    def send(entries: dict) -> dict:
        response = lab.post(
            f"{API}/project-archives",
            headers=lab_auth,
            files={"file": ("broken.zip", zip_bytes(entries))},
        )
        assert response.status_code == 422, response.text
        return response.json()

    unknown_key = parts["triplets.csv"] + b"s0,nowhere,s1,upload,,,,train,false,,,\n"
    refused = send({**parts, "triplets.csv": unknown_key})
    assert "nowhere" in json.dumps(refused)
    # Past the first committed chunk of answers (20,000 rows): the half-made project,
    # committed with that chunk, is removed again.
    header, _, _ = parts["triplets.csv"].partition(b"\n")
    many = (
        header + b"\n" + b"s0,s3,s1,upload,,,,,,,,\n" * 20_500 + b"s0,s3,nowhere,upload,,,,,,,,\n"
    )
    assert "nowhere" in json.dumps(send({**parts, "triplets.csv": many}))
    # The screens: each entry checked, the first fault named by its place.
    judgements = json.loads(parts["judgements.json"])
    assert judgements, "the pilot's build asked sorting screens"
    for fault, words in (
        ({"shown": ["nowhere"]}, "judgement 1: names item 'nowhere'"),
        ({"format": "tournament"}, "judgement 1: format 'tournament' is not one of"),
        ({"created_at": "yesterday"}, "judgement 1: created_at"),
        ({"chosen": [{"item": "s0", "side": "left"}]}, "judgement 1: chosen"),
    ):
        broken = json.dumps([{**judgements[0], **fault}, *judgements[1:]]).encode()
        problems = send({**parts, "judgements.json": broken})["detail"]
        assert problems[0]["file"] == "judgements.json", problems
        assert problems[0]["message"].startswith(words), problems
    unknown_judgement = parts["triplets.csv"] + b"s0,s1,s2,upload,,,,train,false,,,999999\n"
    refused = send({**parts, "triplets.csv": unknown_judgement})
    assert "'999999' is not one of the archive's judgements" in json.dumps(refused)
    assert "project.json" in json.dumps(send({"triplets.csv": parts["triplets.csv"]}))
    description = json.loads(parts["project.json"])
    description["format_version"] = 99
    assert "format_version 99" in json.dumps(
        send({**parts, "project.json": json.dumps(description)})
    )
    assert lab.get(f"{API}/projects", headers=lab_auth).json() == []
    assert not any((app.state.settings.data_dir.parent / "lab" / "media").glob("*/*"))
