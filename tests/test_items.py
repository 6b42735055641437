"""Item uploads: CSV, JSON and ZIP of images; each problem located; all or nothing."""

import csv
import io
import json
import random

import pytest

from tests.support.uploads import messages, png, upload, zip_bytes

ITEMS_CSV = """key,label,text,split,features
cat,animal,a small cat,train,0.5 1.5
dog,animal,,test,1 2
car,,a red car,,3 4.25
"""


def item_count(client, auth, pid):
    return client.get(f"/api/v1/projects/{pid}", headers=auth).json()["item_count"]


class TestCsvUpload:
    def test_items_arrive_with_labels_text_splits_and_features(self, client, auth, project):
        pid = project["id"]
        response = upload(client, auth, pid, "items", "items.csv", ITEMS_CSV)
        assert response.status_code == 201, response.text
        assert response.json()["rows"] == 3
        page = client.get(f"/api/v1/projects/{pid}/items?features=true", headers=auth).json()
        assert page["total"] == 3
        by_key = {item["key"]: item for item in page["items"]}
        assert by_key["cat"]["features"] == [0.5, 1.5]
        assert by_key["dog"]["split"] == "test" and by_key["dog"]["text"] is None
        assert by_key["car"]["split"] == "unlabelled" and by_key["car"]["label"] is None
        detail = client.get(f"/api/v1/projects/{pid}", headers=auth).json()
        assert detail["feature_dim"] == 2

    def test_feature_columns_and_pagination(self, client, auth, project):
        pid = project["id"]
        rows = "\n".join(f"i{n},{n % 3},{n},{n * 2}" for n in range(250))
        response = upload(
            client, auth, pid, "items", "wide.csv", "key,label,feature_0,feature_1\n" + rows
        )
        assert response.status_code == 201, response.text
        page = client.get(
            f"/api/v1/projects/{pid}/items?limit=100&offset=200&features=true", headers=auth
        ).json()
        assert page["total"] == 250 and len(page["items"]) == 50
        assert page["items"][0]["key"] == "i200" and page["items"][0]["features"] == [200, 400]
        one = client.get(f"/api/v1/projects/{pid}/items/i7", headers=auth).json()
        assert one["label"] == "1" and one["split"] == "train"
        assert (
            client.get(f"/api/v1/projects/{pid}/items?limit=5000", headers=auth).status_code == 422
        )

    def test_unknown_item_is_404(self, client, auth, project):
        response = client.get(f"/api/v1/projects/{project['id']}/items/nope", headers=auth)
        assert response.status_code == 404 and "nope" in response.json()["detail"]

    @pytest.mark.parametrize(
        ("content", "expected"),
        [
            ("key,colour\na,red\n", "items.csv, row 1, column 'colour': unknown column"),
            ("label\nx\n", "items.csv, row 1, column 'key': required column is missing"),
            (
                "key,label\na,x\nb,y\na,z\n",
                "items.csv, row 4, column 'key': duplicate key 'a' (first on row 2)",
            ),
            (
                "key,features\na,1 2\nb,1 2 3\n",
                "items.csv, row 3, column 'features': 3 features; the project's existing items have 2",
            ),
            (
                "key,features\na,1 x\n",
                "items.csv, row 2, column 'features': value 2 ('x') is not a finite number",
            ),
            (
                "key,features\na,1 nan\n",
                "items.csv, row 2, column 'features': value 2 ('nan') is not a finite number",
            ),
            (
                "key,features\na,\nb,1 2\n",
                "items.csv, row 2, column 'features': missing; the project's existing items "
                "have 2 features",
            ),
            ("key,label\na,x,extra\n", "items.csv, row 2: expected 2 fields, found 3"),
            ('key,text\na,"unterminated\n', "items.csv, row 2: malformed CSV"),
            (
                "key,split\na,holdout\n",
                "items.csv, row 2, column 'split': 'holdout' is not one of train, test, unlabelled",
            ),
            (
                "key,split\na,train\n",
                "items.csv, row 2, column 'split': split 'train' needs a label",
            ),
            ("key\nbad/key\n", "items.csv, row 2, column 'key': must not contain '/'"),
            ("key\n", "items.csv: no items in the file"),
            ("", "items.csv: file is empty"),
            (b"key\n\xff\xfe\n", "items.csv, row 2: not UTF-8 text"),
        ],
    )
    def test_bad_csv_is_rejected_with_its_location(self, client, auth, project, content, expected):
        pid = project["id"]
        with_features = "features" in str(content)  # the project's items have them or not
        kept = "key,features\nkept,0 0\n" if with_features else "key\nkept\n"
        upload(client, auth, pid, "items", "keep.csv", kept)
        response = upload(client, auth, pid, "items", "items.csv", content)
        assert response.status_code == 422, response.text
        assert any(m.startswith(expected) for m in messages(response)), messages(response)
        assert item_count(client, auth, pid) == 1

    def test_numeric_labels_are_checked_for_number_projects(self, client, auth):
        pid = client.post(
            "/api/v1/projects", headers=auth, json={"name": "ages", "label_type": "number"}
        ).json()["id"]
        response = upload(client, auth, pid, "items", "ages.csv", "key,label\na,3.5\nb,old\n")
        assert response.status_code == 422
        assert messages(response) == [
            "ages.csv, row 3, column 'label': 'old' is not a number "
            "(this project's labels are numbers)"
        ]

    def test_many_problems_reported_at_once(self, client, auth, project):
        content = "key,features\n" + "".join(f"k{n},x\n" for n in range(10))
        response = upload(client, auth, project["id"], "items", "items.csv", content)
        assert len(response.json()["detail"]) == 10

    def test_key_already_in_project_rejects_whole_upload(self, client, auth, project):
        pid = project["id"]
        upload(client, auth, pid, "items", "first.csv", "key\na\nb\n")
        response = upload(client, auth, pid, "items", "second.csv", "key\nc\nb\n")
        assert response.status_code == 422
        assert messages(response) == [
            "second.csv, row 3, column 'key': item 'b' already exists in this project"
        ]
        assert item_count(client, auth, pid) == 2

    def test_feature_length_must_match_the_project(self, client, auth, project):
        pid = project["id"]
        upload(client, auth, pid, "items", "first.csv", "key,features\na,1 2\n")
        response = upload(
            client, auth, pid, "items", "second.csv", "key,features\nb,1 2 3\nc,\nd,3 4\n"
        )
        assert messages(response) == [
            "second.csv, row 2, column 'features': 3 features; the project's existing items have 2",
            "second.csv, row 3, column 'features': missing; the project's existing items have 2 features",
        ]
        # No row that fits: one problem of the whole file, not one per row.
        response = upload(client, auth, pid, "items", "third.csv", "key,features\nb,1 2 3\nc,\n")
        assert messages(response) == [
            "third.csv, column 'features': no row has the 2 features that the items the "
            "project holds (1) have; row 2 has 3 features"
        ]

    def test_unknown_format_is_415(self, client, auth, project):
        response = upload(client, auth, project["id"], "items", "items.parquet", b"PAR1")
        assert response.status_code == 415
        assert "?format=" in response.json()["detail"]


class TestJsonUpload:
    def test_objects_with_feature_lists(self, client, auth, project):
        pid = project["id"]
        data = [
            {"key": "a", "label": 1, "features": [1, 2]},
            {"key": 2, "text": "two", "features": [3, 4]},
        ]
        response = upload(client, auth, pid, "items", "items.json", json.dumps(data))
        assert response.status_code == 201, response.text
        item = client.get(f"/api/v1/projects/{pid}/items/2?", headers=auth).json()
        assert item["text"] == "two" and item["features"] == [3.0, 4.0]

    @pytest.mark.parametrize(
        ("data", "expected"),
        [
            ('[{"key": "a", "colour": 1}]', "items.json, row 1, column 'colour': unknown field"),
            (
                '[{"key": "a", "features": [1, "x"]}]',
                "items.json, row 1, column 'features': value 2",
            ),
            (
                '[{"key": "a", "features": [1, 2]}, {"key": "b", "features": [1]}]',
                "items.json, row 2, column 'features': 1 features",
            ),
            ('{"key": "a"}', "items.json: expected a JSON array"),
            ('[{"key": "a"', "items.json: not valid JSON"),
            ('[{"label": "x"}]', "items.json, row 1, column 'key': key is required"),
            (
                '[{"key": "a", "label": true}]',
                "items.json, row 1, column 'label': must be a class name",
            ),
        ],
    )
    def test_bad_json_is_rejected_with_its_location(self, client, auth, project, data, expected):
        response = upload(client, auth, project["id"], "items", "items.json", data)
        assert response.status_code == 422
        assert any(m.startswith(expected) for m in messages(response)), messages(response)
        assert item_count(client, auth, project["id"]) == 0


class TestZipUpload:
    def test_images_are_stored_and_served(self, client, auth, project, settings):
        pid = project["id"]
        red, blue = png((255, 0, 0)), png((0, 0, 255))
        archive = zip_bytes(
            {
                "manifest.csv": "key,label,image\nr,warm,img/r.png\nb,cold,img/b.png\n",
                "img/r.png": red,
                "img/b.png": blue,
            }
        )
        response = upload(client, auth, pid, "items", "set.zip", archive)
        assert response.status_code == 201, response.text
        item = client.get(f"/api/v1/projects/{pid}/items/r", headers=auth).json()
        image = client.get(item["image_url"], headers=auth)
        assert image.status_code == 200 and image.content == red
        assert image.headers["content-type"] == "image/png"
        assert client.get(item["image_url"]).status_code == 401

    @pytest.mark.parametrize(
        ("entries", "expected"),
        [
            (
                {"manifest.csv": "key,image\na,a.png\n", "a.png": b"this is text, not a PNG"},
                "set.zip:a.png: not an image",
            ),
            (
                {"manifest.csv": "key,image\na,missing.png\n"},
                "set.zip:manifest.csv, row 2, column 'image': 'missing.png' is not in the archive",
            ),
            (
                {"manifest.csv": "key,image\na,a.png\n", "../evil.png": png()},
                "set.zip:../evil.png: '..' in archive path",
            ),
            (
                {"manifest.csv": "key,image\na,a.png\n", "/etc/evil.png": png()},
                "set.zip:/etc/evil.png: absolute path in archive",
            ),
            ({"a.png": png()}, "set.zip: a ZIP upload needs one CSV manifest"),
            (
                {"manifest.csv": "key,image,colour\na,a.png,red\n", "a.png": png()},
                "set.zip:manifest.csv, row 1, column 'colour': unknown column",
            ),
        ],
    )
    def test_bad_archives_are_rejected(self, client, auth, project, settings, entries, expected):
        pid = project["id"]
        response = upload(client, auth, pid, "items", "set.zip", zip_bytes(entries))
        assert response.status_code == 422, response.text
        assert any(m.startswith(expected) for m in messages(response)), messages(response)
        assert item_count(client, auth, pid) == 0
        assert not (settings.media_dir / str(pid)).exists() or not any(
            (settings.media_dir / str(pid)).iterdir()
        )

    def test_zip_bomb_is_refused_before_unpacking(self, client, auth, project):
        bomb = zip_bytes({"manifest.csv": "key,image\na,a.png\n", "a.png": b"\0" * (30 << 20)})
        assert len(bomb) < 100_000
        response = upload(client, auth, project["id"], "items", "set.zip", bomb)
        assert response.status_code == 422
        assert "possible ZIP bomb" in messages(response)[0]

    def test_an_image_entry_is_refused_by_its_size_before_it_is_read(
        self, client, auth, project, settings
    ):
        """Under the ratio check (an image compresses little), yet far larger than any
        image needs: refused from its header, so memory never holds it."""
        settings.max_image_bytes = 2 << 20
        noise = random.Random(1).randbytes(4 << 20)
        entries = {"manifest.csv": "key,image\na,a.png\nb,b.png\n", "a.png": noise, "b.png": png()}
        response = upload(client, auth, project["id"], "items", "set.zip", zip_bytes(entries))
        assert response.status_code == 422
        assert messages(response) == [
            "set.zip:a.png: 4194304 bytes unpacked; an image may have at most 2097152 "
            "(CLOSER_MAX_IMAGE_BYTES) (row 2 of the manifest)"
        ]
        assert item_count(client, auth, project["id"]) == 0

    def test_not_a_zip(self, client, auth, project):
        response = upload(client, auth, project["id"], "items", "set.zip", b"not a zip at all")
        assert response.status_code == 422 and "not a ZIP archive" in messages(response)[0]

    def test_rejected_upload_leaves_no_image_files(self, client, auth, project, settings):
        pid = project["id"]
        entries = {
            "manifest.csv": "key,image\na,a.png\nb,b.png\n",
            "a.png": png(),
            "b.png": b"junk",
        }
        upload(client, auth, pid, "items", "set.zip", zip_bytes(entries))
        folder = settings.media_dir / str(pid)
        assert not folder.exists() or list(folder.iterdir()) == []


class TestLimitsAndRetries:
    def test_body_over_the_limit_is_413(self, client, auth, project, settings):
        big = b"key\n" + b"k\n" * (settings.max_upload_bytes // 2 + 10)
        response = upload(client, auth, project["id"], "items", "big.csv", big)
        assert response.status_code == 413
        assert str(settings.max_upload_bytes) in response.json()["detail"]
        assert item_count(client, auth, project["id"]) == 0

    def test_chunked_body_over_the_limit_is_413(self, client, auth, project, settings):
        def chunks():
            for _ in range(settings.max_upload_bytes // 65536 + 2):
                yield b"x" * 65536

        response = client.post(
            f"/api/v1/projects/{project['id']}/items",
            headers={**auth, "Content-Type": "multipart/form-data; boundary=b"},
            content=chunks(),
        )
        assert response.status_code == 413

    def test_retry_with_the_same_idempotency_key_adds_nothing(self, client, auth, project):
        pid = project["id"]
        key = {"Idempotency-Key": "batch-1"}
        first = upload(client, auth, pid, "items", "a.csv", "key\na\nb\n", headers=key)
        again = upload(client, auth, pid, "items", "a.csv", "key\na\nb\n", headers=key)
        assert first.status_code == 201 and again.status_code == 200
        assert again.json() == {**first.json(), "replayed": True}
        assert item_count(client, auth, pid) == 2


class TestExport:
    @pytest.fixture
    def loaded(self, client, auth, project):
        pid = project["id"]
        archive = zip_bytes(
            {
                "manifest.csv": ITEMS_CSV.replace("features", "features,image")
                .replace("0.5 1.5", "0.5 1.5,c.png")
                .replace("1 2\n", "1 2,\n")
                .replace("3 4.25", "3 4.25,c.png"),
                "c.png": png(),
            }
        )
        assert upload(client, auth, pid, "items", "set.zip", archive).status_code == 201
        return pid

    def test_csv_export_round_trips(self, client, auth, loaded):
        response = client.get(f"/api/v1/projects/{loaded}/items/export?format=csv", headers=auth)
        assert response.status_code == 200
        assert "attachment" in response.headers["content-disposition"]
        rows = list(csv.DictReader(io.StringIO(response.text)))
        assert [r["key"] for r in rows] == ["cat", "dog", "car"]
        assert rows[0]["features"] == "0.5 1.5" and rows[2]["features"] == "3.0 4.25"
        assert rows[1]["image"] == "" and rows[0]["image"].endswith(".png")

    def test_json_export(self, client, auth, loaded):
        data = client.get(
            f"/api/v1/projects/{loaded}/items/export?format=json", headers=auth
        ).json()
        assert data[0] == {
            "key": "cat",
            "label": "animal",
            "text": "a small cat",
            "split": "train",
            "image": data[0]["image"],
            "features": [0.5, 1.5],
            "alt": None,
        }

    def test_zip_export_uploads_again_into_a_new_project(self, client, auth, loaded):
        exported = client.get(f"/api/v1/projects/{loaded}/items/export?format=zip", headers=auth)
        assert exported.headers["content-type"] == "application/zip"
        other = client.post("/api/v1/projects", headers=auth, json={"name": "copy"}).json()["id"]
        response = upload(client, auth, other, "items", "export.zip", exported.content)
        assert response.status_code == 201, response.text
        original = client.get(
            f"/api/v1/projects/{loaded}/items/export?format=json", headers=auth
        ).json()
        copied = client.get(
            f"/api/v1/projects/{other}/items/export?format=json", headers=auth
        ).json()
        assert original == copied


def test_items_are_found_counted_and_fixed_as_an_upload_would_have_them(client, auth, project):
    """The items page's API: search by key, text or label, how many answers name each
    item, and a label or split fixed under the upload's rules."""
    pid = project["id"]
    rows = "key,label,text,split\nred-1,red,a warm red,train\nblue-1,blue,a cold blue,test\nodd,,50% grey_ish,\n"
    assert upload(client, auth, pid, "items", "i.csv", rows).status_code == 201
    answers = "anchor,closer,farther\nred-1,blue-1,odd\nred-1,odd,blue-1\nodd,red-1,blue-1\n"
    assert upload(client, auth, pid, "triplets", "t.csv", answers).status_code == 201
    url = f"/api/v1/projects/{pid}/items"

    def keys(**query):
        found = client.get(url, headers=auth, params=query).json()
        return [(item["key"], item["answers"]) for item in found["items"]], found["total"]

    assert keys() == ([("red-1", 3), ("blue-1", 3), ("odd", 3)], 3)
    assert keys(search="RED") == ([("red-1", 3)], 1)  # key, text or label, any case
    assert keys(search="cold") == ([("blue-1", 3)], 1)
    assert keys(search="50%") == ([("odd", 3)], 1)  # % and _ are plain characters
    assert keys(search="_") == ([("odd", 3)], 1)
    assert keys(split="test") == ([("blue-1", 3)], 1)

    fixed = client.patch(f"{url}/odd", headers=auth, json={"label": "grey"})
    assert fixed.status_code == 200, fixed.text
    assert (fixed.json()["label"], fixed.json()["split"]) == ("grey", "train")
    moved = client.patch(f"{url}/odd", headers=auth, json={"split": "test"})
    assert (moved.json()["label"], moved.json()["split"]) == ("grey", "test")
    cleared = client.patch(f"{url}/red-1", headers=auth, json={"label": None})
    assert (cleared.json()["label"], cleared.json()["split"]) == (None, "unlabelled")
    for body, message in (
        ({"split": "train"}, "split: split 'train' needs a label"),
        ({"label": "  "}, "label: empty; send null to take the label away"),
        ({"split": "holdout"}, "split"),
        ({"colour": "red"}, "colour"),
    ):
        refused = client.patch(f"{url}/red-1", headers=auth, json=body)
        assert refused.status_code in (400, 422) and message in refused.text, refused.text
    assert client.get(f"{url}/red-1", headers=auth).json()["split"] == "unlabelled"
    assert client.patch(f"{url}/nope", headers=auth, json={"label": "x"}).status_code == 404

    numbers = client.post(
        "/api/v1/projects", headers=auth, json={"name": "ages", "label_type": "number"}
    ).json()["id"]
    upload(client, auth, numbers, "items", "a.csv", "key,label\nkid,7\n")
    refused = client.patch(
        f"/api/v1/projects/{numbers}/items/kid", headers=auth, json={"label": "seven"}
    )
    assert refused.status_code == 400 and "is not a number" in refused.text


def test_an_item_is_deleted_with_its_answers_unless_a_build_asks_about_it(
    app, client, auth, project, settings
):
    """A mistaken item goes with every answer that names it (counts stay true, the
    hourly tallies too) and every query about it, and raters are never asked about it
    again; its image goes unless another item shows it. While a build's trees hold it,
    it stays, and the refusal says which build."""
    from sqlalchemy import select

    from app.core.db import unit_of_work
    from app.models import Item
    from app.triplets import tally
    from tests.support.links import open_link

    pid = project["id"]
    shades = {f"s{i}": png((30 * i, 90, 200 - 20 * i), (8, 8)) for i in range(7)}
    manifest = "key,label,image\n" + "".join(
        f"{key},{'ab'[i % 2]},img/{key}.png\n" for i, key in enumerate(shades)
    )
    manifest += "twin,a,img/s0.png\n"  # the same picture as s0
    archive = zip_bytes(
        {"manifest.csv": manifest, **{f"img/{k}.png": v for k, v in shades.items()}}
    )
    assert upload(client, auth, pid, "items", "shades.zip", archive).status_code == 201
    answers = "anchor,closer,farther\ns0,s1,s2\ns1,s0,s3\ns2,s3,s0\ns3,s4,s5\ns4,s5,s6\n"
    assert upload(client, auth, pid, "triplets", "t.csv", answers).status_code == 201
    with unit_of_work(app.state.session_factory) as session:
        tally.advance(session, pid)  # the worker's upkeep: the counts come from tallies
    url = f"/api/v1/projects/{pid}/items"
    with app.state.session_factory() as session:
        image_of = dict(session.execute(select(Item.key, Item.image_file)).all())

    build = client.post(
        f"/api/v1/projects/{pid}/builds", headers=auth, json={"n_trees": 1, "random_state": 0}
    ).json()
    refused = client.delete(f"{url}/s0", headers=auth)
    assert refused.status_code == 409
    assert "item 's0' is in the trees of build 1 (running)" in refused.json()["detail"]
    assert client.get(f"{url}/s0", headers=auth).status_code == 200
    cancelled = client.post(f"/api/v1/projects/{pid}/builds/{build['id']}/cancel", headers=auth)
    assert cancelled.status_code == 200

    slug = open_link(client, auth, pid)["public_slug"]
    client.patch(
        f"/api/v1/projects/{pid}/rating",
        headers=auth,
        json={"random_share": 1.0, "attention_rate": 0, "answers_per_rater": 0},
    )
    joined = client.post(f"/api/v1/rate/{slug}/raters", json={"participant": "r1"}).json()
    rater = {"X-Rater-Token": joined["rater_token"]}
    shown = client.get(f"/api/v1/rate/{slug}/next", headers=rater).json()["comparison"]
    held = {shown[side]["key"] for side in ("anchor", "left", "right")}
    doomed = "s0" if "s0" in held else min(held - {"twin"})  # one the rater has on screen

    deleted = client.delete(f"{url}/{doomed}", headers=auth)
    assert deleted.status_code == 200, deleted.text
    named = sum(doomed in row.split(",") for row in answers.splitlines()[1:])
    assert deleted.json() == {"key": doomed, "answers_deleted": named, "queries_withdrawn": 1}
    assert client.get(f"{url}/{doomed}", headers=auth).status_code == 404
    assert client.delete(f"{url}/{doomed}", headers=auth).status_code == 404
    detail = client.get(f"/api/v1/projects/{pid}", headers=auth).json()
    assert (detail["item_count"], detail["triplet_count"]) == (7, 5 - named)
    exported = client.get(f"/api/v1/projects/{pid}/triplets/export?format=json", headers=auth)
    assert all(doomed not in row.values() for row in exported.json())
    with unit_of_work(app.state.session_factory) as session:
        tally.advance(session, pid)
        assert tally.answer_count(session, pid) == 5 - named

    # The rater's comparison with it is gone: they get another, never naming it again.
    answered = client.post(
        f"/api/v1/rate/{slug}/answers",
        headers=rater,
        json={"query_id": shown["query_id"], "choice": "left"},
    )
    assert answered.status_code == 404
    for _ in range(40):
        state = client.get(f"/api/v1/rate/{slug}/next", headers=rater).json()
        comparison = state["comparison"]
        assert doomed not in {comparison[side]["key"] for side in ("anchor", "left", "right")}
        client.post(
            f"/api/v1/rate/{slug}/answers",
            headers=rater,
            json={"query_id": comparison["query_id"], "choice": "left"},
        )

    # Its picture goes, unless another item shows the same one (twin shows s0's).
    def pictures():
        return {path.name for path in (settings.data_dir / "media" / str(pid)).iterdir()}

    assert (image_of[doomed] in pictures()) == (doomed == "s0")
    assert client.delete(f"{url}/twin", headers=auth).status_code == 200
    assert (image_of["s0"] in pictures()) == (doomed != "s0")


def test_deleting_an_item_takes_every_judgement_that_showed_it_whole(app, client, auth, project):
    """A "2 of 4" screen implies five triplets, some without a given item: deleting an
    item takes the judgements that showed it, each with all its triplets, and leaves the
    other judgements and the counts true."""
    from sqlalchemy import func, select

    from app.core.db import unit_of_work
    from app.formats import ODD_ONE_OUT, RANK
    from app.models import Item, Judgement, Triplet
    from tests.support.judgements import store_judgements

    pid = project["id"]
    items = "key\n" + "".join(f"k{i}\n" for i in range(8))
    assert upload(client, auth, pid, "items", "items.csv", items).status_code == 201
    with unit_of_work(app.state.session_factory) as session:
        ids = dict(session.execute(select(Item.key, Item.id).where(Item.project_id == pid)).all())
        k = [ids[f"k{i}"] for i in range(8)]
        store_judgements(
            session,
            pid,
            [
                (RANK, [k[0]], [k[1], k[2], k[3], k[4]], [k[2], k[1]]),
                (RANK, [k[5]], [k[6], k[7], k[1], k[2]], [k[7], k[6]]),
                (ODD_ONE_OUT, [], [k[5], k[6], k[7]], [k[7]]),
            ],
        )
    assert client.get(f"/api/v1/projects/{pid}", headers=auth).json()["triplet_count"] == 12

    # k3 was shown on the first screen only, and named by three of its five triplets.
    deleted = client.delete(f"/api/v1/projects/{pid}/items/k3", headers=auth)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["answers_deleted"] == 5
    with app.state.session_factory() as session:
        formats = session.scalars(select(Judgement.format).order_by(Judgement.id)).all()
        assert formats == [RANK, ODD_ONE_OUT]
        assert session.scalar(select(func.count()).select_from(Triplet)) == 7
    assert client.get(f"/api/v1/projects/{pid}", headers=auth).json()["triplet_count"] == 7

    assert client.delete(f"/api/v1/projects/{pid}", headers=auth).status_code == 204
    with app.state.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Judgement)) == 0
