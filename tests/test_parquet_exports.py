"""The Parquet exports (issue 55), on both databases: the answers, the judgements and the
items as pyarrow reads them, with the fixed schemas the README lists, holding what the
JSON exports hold; an empty project's export is a valid file with no rows."""

from __future__ import annotations

import io
import random
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq

from app.items.parquet import ITEMS_SCHEMA
from app.predictions.parquet import PREDICTIONS_SCHEMA
from app.triplets.parquet import JUDGEMENTS_SCHEMA, TRIPLETS_SCHEMA
from app.worker.loop import Worker

API = "/api/v1"
ITEMS = (
    "key,label,text,features\n"
    "circle,round,a circle,0 0\n"
    "oval,round,,0.2 0.1\n"
    "square,angular,a square,3 3\n"
    "triangle,,,3.5 2.5\n"
    "=cmd,angular,,1 1\n"
)


def _parquet(client, auth, path: str) -> pa.Table:
    response = client.get(f"{API}{path}", headers=auth)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/vnd.apache.parquet"
    assert response.headers["content-disposition"].endswith('.parquet"')
    return pq.read_table(io.BytesIO(response.content))


def test_answers_judgements_and_items_export_as_parquet(client, auth, project):
    pid = project["id"]
    client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("items.csv", ITEMS)}
    ).raise_for_status()
    answers = (
        "anchor,closer,farther,rater,response_time_ms,created_at\n"
        "circle,oval,square,ann,1200,2026-11-30T10:00:00+00:00\n"
        "square,triangle,circle,,,\n"
        "=cmd,square,oval,bob,800,2026-11-30T10:00:01.5+00:00\n"
    )
    client.post(
        f"{API}/projects/{pid}/triplets", headers=auth, files={"file": ("t.csv", answers)}
    ).raise_for_status()
    screens = "reference,item1,item2,item3,pick1,rater\ncircle,oval,square,triangle,oval,ann\n"
    client.post(
        f"{API}/projects/{pid}/judgements", headers=auth, files={"file": ("j.csv", screens)}
    ).raise_for_status()

    triplets = _parquet(client, auth, f"/projects/{pid}/triplets/export?format=parquet")
    assert triplets.schema.equals(TRIPLETS_SCHEMA)
    as_json = client.get(f"{API}/projects/{pid}/triplets/export?format=json", headers=auth).json()
    rows = triplets.to_pylist()
    assert len(rows) == len(as_json) == 5  # 3 answers, and the 2 the rank screen implies
    for row, expected in zip(rows, as_json, strict=True):
        created = datetime.fromisoformat(expected.pop("created_at"))
        assert row.pop("created_at") == created.astimezone(UTC)
        expected["adaptive"] = expected["adaptive"] in (True, "true")
        assert row == expected
    assert rows[0]["rater"] == "ann" and rows[0]["response_time_ms"] == 1200
    assert rows[2]["anchor"] == "=cmd"  # as it is: Parquet is no spreadsheet
    assert rows[3]["judgement"] is not None and rows[3]["judgement"] == rows[4]["judgement"]

    judgements = _parquet(client, auth, f"/projects/{pid}/judgements/export?format=parquet")
    assert judgements.schema.equals(JUDGEMENTS_SCHEMA)
    (judgement,) = judgements.to_pylist()
    assert judgement["judgement"] == rows[3]["judgement"]
    assert (judgement["format"], judgement["reference"]) == ("rank", "circle")
    assert judgement["items"] == ["oval", "square", "triangle"]
    assert (judgement["picks"], judgement["rater"]) == (["oval"], "ann")

    items = _parquet(client, auth, f"/projects/{pid}/items/export?format=parquet")
    assert items.schema.equals(ITEMS_SCHEMA)
    by_key = {row["key"]: row for row in items.to_pylist()}
    assert list(by_key) == ["circle", "oval", "square", "triangle", "=cmd"]
    assert by_key["oval"]["features"] == [0.2, 0.1]
    assert by_key["circle"]["text"] == "a circle" and by_key["triangle"]["label"] is None


def test_an_empty_project_exports_valid_parquet_files_with_no_rows(client, auth, project):
    pid = project["id"]
    for path, schema in (
        (f"/projects/{pid}/triplets/export?format=parquet", TRIPLETS_SCHEMA),
        (f"/projects/{pid}/judgements/export?format=parquet", JUDGEMENTS_SCHEMA),
        (f"/projects/{pid}/items/export?format=parquet", ITEMS_SCHEMA),
    ):
        table = _parquet(client, auth, path)
        assert table.num_rows == 0 and table.schema.equals(schema), path


def test_a_models_embedding_and_labels_export_as_parquet(app, client, auth, project):
    pid = project["id"]
    chance = random.Random(3)
    keys = [f"p{i}" for i in range(24)]
    rows = "key,label\n" + "".join(f"{key},{'ab'[i % 2]}\n" for i, key in enumerate(keys))
    client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("items.csv", rows)}
    ).raise_for_status()
    answers = ["anchor,closer,farther"] + [",".join(chance.sample(keys, 3)) for _ in range(400)]
    client.post(
        f"{API}/projects/{pid}/triplets",
        headers=auth,
        files={"file": ("t.csv", "\n".join(answers))},
    ).raise_for_status()
    made = client.post(
        f"{API}/projects/{pid}/models",
        headers=auth,
        json={"name": "map", "kind": "tete", "params": {"max_iter": 50}},
    )
    assert made.status_code == 201, made.text
    model = f"{API}/projects/{pid}/models/{made.json()['id']}"
    Worker(app.state.session_factory).run(until_idle=True)

    embedded = _parquet(client, auth, f"{model.removeprefix(API)}/embedding?format=parquet")
    as_json = client.get(f"{model}/embedding", headers=auth).json()
    assert embedded.column("key").to_pylist() == as_json["keys"]
    dimensions = [f"dim_{d}" for d in range(as_json["dimension"])]
    assert embedded.column_names == ["key", *dimensions, "answered"]
    columns = [embedded.column(d).to_pylist() for d in dimensions]
    coordinates = [list(row) for row in zip(*columns, strict=True)]
    assert coordinates == as_json["coordinates"]
    metadata = embedded.schema.metadata
    assert metadata[b"version"] == str(as_json["version"]).encode()

    labels = _parquet(client, auth, f"{model.removeprefix(API)}/predictions/export?format=parquet")
    assert labels.schema.equals(PREDICTIONS_SCHEMA)
    listed = client.get(f"{model}/predictions/export?format=json", headers=auth).json()
    assert labels.column("key").to_pylist() == [row["key"] for row in listed]
    assert labels.column("label").to_pylist() == [row["label"] or None for row in listed]
