"""Triplet uploads by item key, and streamed exports that upload again as they are."""

import csv
import io
import json

import pytest

from tests.support.uploads import messages, upload

KEYS = [f"item{n}" for n in range(30)]


@pytest.fixture
def pid(client, auth, project):
    items = "key\n" + "\n".join(KEYS) + "\n"
    assert upload(client, auth, project["id"], "items", "items.csv", items).status_code == 201
    return project["id"]


def triplet_count(client, auth, pid):
    return client.get(f"/api/v1/projects/{pid}", headers=auth).json()["triplet_count"]


def export(client, auth, pid, fmt="csv"):
    response = client.get(f"/api/v1/projects/{pid}/triplets/export?format={fmt}", headers=auth)
    assert response.status_code == 200
    return response


class TestUpload:
    def test_csv_triplets_are_stored_in_order(self, client, auth, pid):
        rows = [(KEYS[i % 30], KEYS[(i + 1) % 30], KEYS[(i + 2) % 30]) for i in range(100)]
        content = "anchor,closer,farther\n" + "".join(",".join(r) + "\n" for r in rows)
        response = upload(client, auth, pid, "triplets", "answers.csv", content)
        assert response.status_code == 201, response.text
        assert response.json()["rows"] == 100
        exported = list(
            csv.DictReader(io.StringIO(export(client, auth, pid).text.lstrip("\ufeff")))
        )
        assert [(r["anchor"], r["closer"], r["farther"]) for r in exported] == rows
        assert {r["source"] for r in exported} == {"upload"}

    def test_json_lists_and_objects(self, client, auth, pid):
        data = [
            ["item0", "item1", "item2"],
            {
                "anchor": "item3",
                "closer": "item4",
                "farther": "item5",
                "rater": "p-17",
                "response_time_ms": 812,
                "created_at": "2026-01-02T03:04:05Z",
            },
        ]
        response = upload(client, auth, pid, "triplets", "t.json", json.dumps(data))
        assert response.status_code == 201, response.text
        exported = export(client, auth, pid, "json").json()
        assert exported[0]["anchor"] == "item0" and exported[0]["rater"] is None
        assert exported[1] == {
            "anchor": "item3",
            "closer": "item4",
            "farther": "item5",
            "source": "upload",
            "rater": "p-17",
            "response_time_ms": 812,
            "created_at": "2026-01-02T03:04:05.000000+00:00",
            "split": "train",
            "adaptive": "false",
            "arm": None,
            "version": None,
            "judgement": None,
        }

    def test_adaptive_answers_travel_through_export_and_upload(self, client, auth, pid):
        content = (
            "anchor,closer,farther,adaptive\n"
            "item0,item1,item2,true\nitem3,item4,item5,false\nitem6,item7,item8,\n"
        )
        response = upload(client, auth, pid, "triplets", "t.csv", content)
        assert response.status_code == 201, response.text
        exported = export(client, auth, pid, "json").json()
        assert [row["adaptive"] for row in exported] == ["true", "false", "false"]
        as_json = [{"anchor": "item0", "closer": "item2", "farther": "item1", "adaptive": True}]
        response = upload(client, auth, pid, "triplets", "t.json", json.dumps(as_json))
        assert response.status_code == 201, response.text
        assert export(client, auth, pid, "json").json()[-1]["adaptive"] == "true"
        bad = upload(
            client,
            auth,
            pid,
            "triplets",
            "bad.csv",
            "anchor,closer,farther,adaptive\nitem0,item1,item2,maybe\n",
        )
        assert bad.status_code == 422
        assert "row 2, column 'adaptive': 'maybe' is not true or false" in bad.text

    @pytest.mark.parametrize(
        ("content", "expected"),
        [
            (
                "anchor,closer,farther\nitem0,item1,item9\nitem0,ghost,item2\n",
                "t.csv, row 3, column 'closer': unknown item 'ghost' (not in this project)",
            ),
            (
                "anchor,closer,farther\nitem0,item0,item2\n",
                "t.csv, row 2: repeats an item (item0, item0, item2)",
            ),
            ("anchor,closer,farther\nitem0,item1,item1\n", "t.csv, row 2: repeats an item"),
            (
                "anchor,closer\nitem0,item1\n",
                "t.csv, row 1, column 'farther': required column is missing",
            ),
            (
                "anchor,closer,farther,weight\nitem0,item1,item2,3\n",
                "t.csv, row 1, column 'weight': unknown column",
            ),
            ("anchor,closer,farther\nitem0,item1\n", "t.csv, row 2: expected 3 fields, found 2"),
            (
                "anchor,closer,farther,response_time_ms\nitem0,item1,item2,fast\n",
                "t.csv, row 2, column 'response_time_ms': 'fast' is not a whole number of milliseconds",
            ),
            (
                "anchor,closer,farther,created_at\nitem0,item1,item2,yesterday\n",
                "t.csv, row 2, column 'created_at': 'yesterday' is not an ISO 8601 date and time",
            ),
            (
                "anchor,closer,farther,source\nitem0,item1,item2,crowd\n",
                "t.csv, row 2, column 'source': 'crowd' is not one of upload, rater, oracle",
            ),
            ("anchor,closer,farther\n", "t.csv: no triplets in the file"),
        ],
    )
    def test_bad_rows_reject_the_whole_file(self, client, auth, pid, content, expected):
        upload(
            client, auth, pid, "triplets", "kept.csv", "anchor,closer,farther\nitem0,item1,item2\n"
        )
        response = upload(client, auth, pid, "triplets", "t.csv", content)
        assert response.status_code == 422, response.text
        assert any(m.startswith(expected) for m in messages(response)), messages(response)
        assert triplet_count(client, auth, pid) == 1

    def test_error_far_down_a_large_file_undoes_the_rows_already_streamed(self, client, auth, pid):
        good = "".join(
            f"item{i % 30},item{(i + 1) % 30},item{(i + 2) % 30}\n" for i in range(45_000)
        )
        content = "anchor,closer,farther\n" + good + "item1,item2,nobody\n"
        response = upload(client, auth, pid, "triplets", "big.csv", content)
        assert response.status_code == 422
        assert messages(response) == [
            "big.csv, row 45002, column 'farther': unknown item 'nobody' (not in this project)"
        ]
        assert triplet_count(client, auth, pid) == 0

    @pytest.mark.parametrize(
        ("data", "expected"),
        [
            (
                '[["item0", "item1"]]',
                "t.json, row 1: expected [anchor, closer, farther], found 2 values",
            ),
            (
                '[{"anchor": "item0", "closer": "item1", "further": "item2"}]',
                "t.json, row 1, column 'further': unknown field",
            ),
            ('[["item0", "item1", 7]]', "t.json, row 1, column 'farther': unknown item '7'"),
            ('[["item0", "item1", null]]', "t.json, row 1, column 'farther': must be an item key"),
            ('{"a": 1}', "t.json: expected a JSON array of triplets"),
        ],
    )
    def test_bad_json(self, client, auth, pid, data, expected):
        response = upload(client, auth, pid, "triplets", "t.json", data)
        assert response.status_code == 422
        assert any(m.startswith(expected) for m in messages(response)), messages(response)
        assert triplet_count(client, auth, pid) == 0

    def test_items_of_another_project_are_unknown(self, client, auth, pid):
        other = client.post("/api/v1/projects", headers=auth, json={"name": "other"}).json()["id"]
        upload(client, auth, other, "items", "i.csv", "key\nx\ny\nz\n")
        response = upload(client, auth, pid, "triplets", "t.csv", "anchor,closer,farther\nx,y,z\n")
        assert response.status_code == 422

    def test_retried_upload_counts_once(self, client, auth, pid):
        content = "anchor,closer,farther\nitem0,item1,item2\nitem3,item4,item5\n"
        headers = {"Idempotency-Key": "upload-42"}
        first = upload(client, auth, pid, "triplets", "t.csv", content, headers=headers)
        second = upload(client, auth, pid, "triplets", "t.csv", content, headers=headers)
        assert (first.status_code, second.status_code) == (201, 200)
        assert second.headers["idempotent-replayed"] == "true"
        assert triplet_count(client, auth, pid) == 2
        as_items = upload(client, auth, pid, "items", "i.csv", "key\nnew\n", headers=headers)
        assert as_items.status_code == 409

    def test_rejected_upload_can_be_retried_with_the_same_key(self, client, auth, pid):
        headers = {"Idempotency-Key": "fix-and-retry"}
        bad = upload(
            client,
            auth,
            pid,
            "triplets",
            "t.csv",
            "anchor,closer,farther\nitem0,x,item2\n",
            headers=headers,
        )
        assert bad.status_code == 422
        good = upload(
            client,
            auth,
            pid,
            "triplets",
            "t.csv",
            "anchor,closer,farther\nitem0,item1,item2\n",
            headers=headers,
        )
        assert good.status_code == 201 and triplet_count(client, auth, pid) == 1


class TestExport:
    def test_csv_export_uploads_again_with_every_column(self, client, auth, pid):
        content = (
            "anchor,closer,farther,rater,response_time_ms,created_at\n"
            "item0,item1,item2,alice,950,2026-03-01T10:00:00+00:00\n"
            "item2,item1,item0,,,\n"
        )
        assert upload(client, auth, pid, "triplets", "t.csv", content).status_code == 201
        first = export(client, auth, pid).text
        other = client.post("/api/v1/projects", headers=auth, json={"name": "copy"}).json()["id"]
        upload(client, auth, other, "items", "items.csv", "key\n" + "\n".join(KEYS) + "\n")
        again = upload(client, auth, other, "triplets", "export.csv", first)
        assert again.status_code == 201, again.text
        rows = list(csv.DictReader(io.StringIO(export(client, auth, other).text)))
        assert rows[0]["rater"] == "alice" and rows[0]["response_time_ms"] == "950"
        assert rows[0]["created_at"] == "2026-03-01T10:00:00.000000+00:00"
        assert rows == list(csv.DictReader(io.StringIO(first)))

    def test_empty_project_exports_header_or_empty_array(self, client, auth, pid):
        # With a byte-order mark, as Excel reads UTF-8.
        assert export(client, auth, pid).content.decode("utf-8") == (
            "\ufeffanchor,closer,farther,source,rater,response_time_ms,created_at,split,"
            "adaptive,arm,version,judgement\n"
        )
        assert export(client, auth, pid, "json").json() == []

    def test_export_streams_in_chunks(self, client, auth, pid):
        content = "anchor,closer,farther\n" + "item0,item1,item2\n" * 50_000
        upload(client, auth, pid, "triplets", "t.csv", content)
        with client.stream("GET", f"/api/v1/projects/{pid}/triplets/export", headers=auth) as resp:
            chunks = [len(chunk) for chunk in resp.iter_raw()]
        assert sum(chunks) > 50_000 * 20 and len(chunks) > 2


def test_simultaneous_retries_store_the_rows_once(client, auth, pid):
    from concurrent.futures import ThreadPoolExecutor

    content = "anchor,closer,farther\n" + "item0,item1,item2\n" * 20_000
    headers = {"Idempotency-Key": "double-click"}
    with ThreadPoolExecutor(4) as pool:
        responses = list(
            pool.map(
                lambda _: upload(client, auth, pid, "triplets", "t.csv", content, headers=headers),
                range(4),
            )
        )
    codes = sorted(r.status_code for r in responses)
    assert codes.count(201) == 1 and set(codes) <= {200, 201, 409}, codes
    assert triplet_count(client, auth, pid) == 20_000
