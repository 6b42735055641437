"""Judgement files on both databases: odd-one-out and rank judgements uploaded (CSV in
THINGS' and ImageNet-HSJ's layouts, and JSON), each stored with the triplets it
implies; a bad file names the row and field and changes nothing, even after committed
chunks; a retried upload counts once; the export uploads again as the same judgements."""

from __future__ import annotations

import csv
import io
import json

import pytest
from sqlalchemy import event, func, select

from app.models import Judgement, Triplet, Upload
from app.triplets import judged

API = "/api/v1"


def _project(client, auth, name: str, count: int = 20) -> int:
    pid = client.post(f"{API}/projects", json={"name": name}, headers=auth).json()["id"]
    rows = "key\n" + "".join(f"k{n}\n" for n in range(count))
    uploaded = client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", rows)}
    )
    assert uploaded.status_code == 201, uploaded.text
    return pid


def _upload(client, auth, pid: int, name: str, body: str, **params):
    return client.post(
        f"{API}/projects/{pid}/judgements",
        headers={**auth, **params.pop("headers", {})},
        params=params,
        files={"file": (name, body)},
    )


def _counts(app, pid: int) -> tuple[int, int]:
    with app.state.session_factory() as session:
        judgements = session.scalar(select(func.count()).where(Judgement.project_id == pid))
        triplets = session.scalar(select(func.count()).where(Triplet.project_id == pid))
    return judgements, triplets


THINGS = "item1,item2,item3,pick1\nk0,k1,k2,k2\nk3,k4,k5,k3\n"
HSJ = (
    "reference,item1,item2,item3,item4,item5,item6,item7,item8,pick1,pick2,rater,response_time_ms\n"
    "k10,k0,k1,k2,k3,k4,k5,k6,k7,k3,k0,p1,2400\n"
    "k11,k0,k1,k2,k3,k4,k5,k6,k7,k7,k6,p2,\n"
)


def test_odd_one_out_and_rank_files_are_stored_with_the_triplets_they_imply(client, auth, app):
    pid = _project(client, auth, "files")
    things = _upload(client, auth, pid, "things.csv", THINGS)
    assert things.status_code == 201, things.text
    assert things.json()["rows"] == 2
    assert _counts(app, pid) == (2, 4)
    hsj = _upload(client, auth, pid, "hsj.csv", HSJ)
    assert hsj.status_code == 201, hsj.text
    assert _counts(app, pid) == (4, 4 + 2 * 13)
    with app.state.session_factory() as session:
        rows = session.scalars(select(Judgement).order_by(Judgement.id)).all()
        triplets = session.scalars(select(Triplet).where(Triplet.judgement_id == rows[2].id)).all()
    assert [row.format for row in rows] == ["odd_one_out"] * 2 + ["rank"] * 2
    assert rows[2].response_time_ms == 2400 and rows[2].rater_id is not None
    assert len(triplets) == 13 and {t.anchor_id for t in triplets} == set(rows[2].context)
    first, second = rows[2].chosen
    assert (first, second) in {(t.closer_id, t.farther_id) for t in triplets}
    answers = client.get(f"{API}/projects/{pid}", headers=auth).json()
    assert answers["triplet_count"] == 30


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("item1,item2,item3,pick1\nk0,k1,k2,k2\nk0,k1,nope,k0\n", "row 3, column 'item3'"),
        ("item1,item2,item3,pick1\nk0,k0,k2,k2\n", "row 2: shows an item twice"),
        ("item1,item2,item3,pick1\nk0,k1,k2,k9\n", "row 2: picks must be different items"),
        ("reference,item1,item2,item3,pick1\nk0,k0,k1,k2,k1\n", "row 2, column 'reference'"),
        ("reference,item1,item2,item3,pick1,pick2,pick3\nk9,k0,k1,k2,k0,k1,k2\n", "row 2: a rank"),
        ("item1,item2,item3,item4,pick1\nk0,k1,k2,k3,k0\n", "row 2: an odd-one-out shows 3"),
        ("format,item1,item2,item3,pick1\nsort,k0,k1,k2,k0\n", "row 2, column 'format'"),
        ("item1,item3,pick1\nk0,k1,k0\n", "numbered from 1 without gaps"),
        ("item1,item2,item3,pick1,colour\nk0,k1,k2,k0,red\n", "column 'colour': unknown column"),
    ],
)
def test_a_bad_judgement_file_names_the_row_and_field_and_changes_nothing(
    client, auth, app, body, where
):
    pid = _project(client, auth, "bad")
    refused = _upload(client, auth, pid, "bad.csv", body)
    assert refused.status_code == 422, refused.text
    assert where in json.dumps(refused.json()["detail"]), refused.text
    assert _counts(app, pid) == (0, 0)


def test_a_file_refused_after_committed_chunks_leaves_nothing(client, auth, app, monkeypatch):
    monkeypatch.setattr(judged, "_CHUNK", 3)  # a chunk committed every three judgements
    pid = _project(client, auth, "chunks")
    rows = "".join(f"k{n},k{n + 1},k{n + 2},k{n}\n" for n in range(10))
    refused = _upload(
        client, auth, pid, "late.csv", THINGS.splitlines()[0] + "\n" + rows + "k0,k1,zz,k0\n"
    )
    assert refused.status_code == 422 and "row 12" in refused.text
    assert _counts(app, pid) == (0, 0)
    with app.state.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Upload)) == 1  # the items'
    skipped = _upload(
        client,
        auth,
        pid,
        "late.csv",
        THINGS.splitlines()[0] + "\n" + rows + "k0,k1,zz,k0\n",
        on_error="skip",
    )
    assert skipped.status_code == 201 and skipped.json()["skipped_rows"] == 1
    assert _counts(app, pid) == (10, 20)


def test_a_retried_upload_counts_once_and_the_export_uploads_again(client, auth, app):
    pid = _project(client, auth, "source")
    key = {"headers": {"Idempotency-Key": "judgements-1"}}
    first = _upload(client, auth, pid, "hsj.csv", HSJ, **key)
    again = _upload(client, auth, pid, "hsj.csv", HSJ, **key)
    assert first.status_code == 201 and again.status_code == 200 and again.json()["replayed"]
    entries = [
        {"items": ["k1", "k2", "k3"], "picks": ["k1"], "response_time_ms": 800},
        {"reference": "k5", "items": ["k1", "k2", "k3", "k4"], "picks": ["k4"], "format": "rank"},
    ]
    posted = _upload(client, auth, pid, "more.json", json.dumps(entries))
    assert posted.status_code == 201, posted.text
    assert _counts(app, pid) == (4, 26 + 2 + 3)

    exported = client.get(f"{API}/projects/{pid}/judgements/export", headers=auth)
    assert exported.status_code == 200
    table = list(csv.DictReader(io.StringIO(exported.text)))
    assert [row["format"] for row in table] == ["rank", "rank", "odd_one_out", "rank"]
    assert table[0]["pick1"] == "k3" and table[0]["pick2"] == "k0" and table[0]["rater"] == "p1"
    as_json = client.get(f"{API}/projects/{pid}/judgements/export?format=json", headers=auth)
    assert [row["items"] for row in as_json.json()][2] == ["k1", "k2", "k3"]

    copy = _project(client, auth, "copy")
    uploaded = _upload(client, auth, copy, "export.csv", exported.text)
    assert uploaded.status_code == 201, uploaded.text
    assert _counts(app, copy) == (4, 31)
    again = client.get(f"{API}/projects/{copy}/judgements/export?format=json", headers=auth)
    drop = ("judgement", "created_at")
    assert [{k: v for k, v in row.items() if k not in drop} for row in again.json()] == [
        {k: v for k, v in row.items() if k not in drop} for row in as_json.json()
    ]


def test_an_archive_keeps_a_screen_studys_format_judgements_and_answers(client, auth, app):
    """The archive holds the judgement format, every judgement and every triplet, each
    triplet still one of its judgement's."""
    pid = _project(client, auth, "screens")
    client.patch(
        f"{API}/projects/{pid}/rating",
        headers=auth,
        json={"judgement": "rank", "shown": 8, "picks": 2},
    ).raise_for_status()
    assert _upload(client, auth, pid, "hsj.csv", HSJ).status_code == 201
    archive = client.get(f"{API}/projects/{pid}/archive", headers=auth)
    assert archive.status_code == 200
    imported = client.post(
        f"{API}/project-archives", headers=auth, files={"file": ("screens.zip", archive.content)}
    )
    assert imported.status_code == 201, imported.text
    copy = imported.json()["id"]
    rating = client.get(f"{API}/projects/{copy}/rating", headers=auth).json()
    assert (rating["judgement"], rating["shown"], rating["picks"]) == ("rank", 8, 2)
    assert _counts(app, copy) == (2, 26)

    def judgements(project: int) -> list[dict]:
        exported = client.get(
            f"{API}/projects/{project}/judgements/export?format=json", headers=auth
        ).json()
        return [{k: v for k, v in row.items() if k != "judgement"} for row in exported]

    def screens_of_answers(project: int) -> list[int]:
        answers = client.get(
            f"{API}/projects/{project}/triplets/export?format=json", headers=auth
        ).json()
        first = {}
        return [first.setdefault(row["judgement"], len(first)) for row in answers]

    assert judgements(copy) == judgements(pid)
    assert screens_of_answers(copy) == screens_of_answers(pid) == [0] * 13 + [1] * 13


@pytest.mark.parametrize(
    ("route", "first", "other"),
    [
        ("judgements", ("a.csv", THINGS), ("a.csv", THINGS.replace("k3,k4,k5,k3", "k3,k4,k6,k3"))),
        (
            "triplets",
            ("t.csv", "anchor,closer,farther\nk0,k1,k2\n"),
            ("t.json", '[["k0","k2","k1"]]'),
        ),
        ("items", ("i.csv", "key\nn1\n"), ("i.csv", "key\nn2\n")),
    ],
)
def test_a_key_sent_again_with_another_file_is_refused_and_changes_nothing(
    client, auth, app, route, first, other
):
    pid = _project(client, auth, "keys")
    key = {"Idempotency-Key": f"{route}-1"}

    def send(file, **params):
        return client.post(
            f"{API}/projects/{pid}/{route}",
            headers={**auth, **key},
            params=params,
            files={"file": file},
        )

    assert send(first).status_code == 201
    before = _counts(app, pid), client.get(f"{API}/projects/{pid}", headers=auth).json()
    for refused in (send(other), send(first, on_error="skip")):
        assert refused.status_code == 409, refused.text
        assert f"Idempotency-Key '{route}-1' was used for another request" in refused.text
    assert (_counts(app, pid), client.get(f"{API}/projects/{pid}", headers=auth).json()) == before
    again = send(first)
    assert again.status_code == 200 and again.json()["replayed"] is True


@pytest.mark.parametrize(
    ("name", "body", "where"),
    [
        ("half.csv", "item1,item2,item3,pick1,response_time_ms\nk0,k1,k2,k0,1.5\n", "row 2"),
        ("neg.csv", "item1,item2,item3,pick1,response_time_ms\nk0,k1,k2,k0,-4\n", "row 2"),
        (
            "text.json",
            '[{"items": ["k0","k1","k2"], "picks": ["k0"], "response_time_ms": "12"}]',
            "row 1",
        ),
        (
            "float.json",
            '[{"items": ["k0","k1","k2"], "picks": ["k0"], "response_time_ms": 12.5}]',
            "row 1",
        ),
        (
            "flag.json",
            '[{"items": ["k0","k1","k2"], "picks": ["k0"], "response_time_ms": true}]',
            "row 1",
        ),
    ],
)
def test_a_response_time_is_a_whole_number_as_the_rater_api_takes_it(
    client, auth, app, name, body, where
):
    pid = _project(client, auth, "times")
    refused = _upload(client, auth, pid, name, body)
    assert refused.status_code == 422, refused.text
    detail = json.dumps(refused.json()["detail"])
    assert f"{where}, column 'response_time_ms'" in detail and "whole number" in detail, detail
    assert _counts(app, pid) == (0, 0)
    triplet = client.post(
        f"{API}/projects/{pid}/triplets",
        headers=auth,
        files={"file": ("t.csv", "anchor,closer,farther,response_time_ms\nk0,k1,k2,1.5\n")},
    )
    assert triplet.status_code == 422 and "whole number" in triplet.text
    taken = [
        ("ok.csv", "item1,item2,item3,pick1,response_time_ms\nk0,k1,k2,k0, 812\n"),
        ("ok.json", '[{"items": ["k0","k1","k2"], "picks": ["k0"], "response_time_ms": 812}]'),
    ]
    for file, good in taken:
        assert _upload(client, auth, pid, file, good).status_code == 201
    with app.state.session_factory() as session:
        assert session.scalars(select(Judgement.response_time_ms)).all() == [812, 812]


def test_an_unknown_format_cell_is_refused_naming_the_row(client, auth, app):
    pid = _project(client, auth, "formats")
    body = "format,item1,item2,item3,pick1\nodd_one_out,k0,k1,k2,k0\ntriangle,k0,k1,k2,k0\n"
    refused = _upload(client, auth, pid, "f.csv", body)
    assert refused.status_code == 422
    assert "row 3, column 'format': 'triangle' is not" in json.dumps(refused.json()["detail"])
    assert _counts(app, pid) == (0, 0)


def test_a_bad_key_at_the_end_of_a_long_file_is_refused_before_anything_is_written(
    client, auth, app, monkeypatch
):
    monkeypatch.setattr(judged, "_CHUNK", 50)  # many committed chunks, were they written
    pid = _project(client, auth, "first pass")
    writes: list[str] = []

    def count(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("INSERT INTO JUDGEMENTS"):
            writes.append(statement)

    engine = app.state.engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        rows = "".join(f"k{n % 17},k{n % 17 + 1},k{n % 17 + 2},k{n % 17}\n" for n in range(2_000))
        body = "item1,item2,item3,pick1\n" + rows + "k0,k1,nope,k0\n"
        refused = _upload(client, auth, pid, "long.csv", body)
        assert refused.status_code == 422 and "row 2002, column 'item3'" in refused.text
        assert writes == []  # not one chunk of the 40 before it
        with app.state.session_factory() as session:
            assert session.scalar(select(func.count()).select_from(Upload)) == 1  # the items'
        taken = _upload(client, auth, pid, "long.csv", "item1,item2,item3,pick1\n" + rows)
        assert taken.status_code == 201 and taken.json()["rows"] == 2_000
        assert writes and _counts(app, pid) == (2_000, 4_000)  # the listener sees writes
    finally:
        event.remove(engine, "before_cursor_execute", count)
