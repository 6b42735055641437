"""Real uploads are messy: with on_error=skip the bad rows are left out and listed (row,
reason, count) and the rest is stored; the default stays all or nothing (issue 16)."""

from __future__ import annotations

import json

API = "/api/v1"


def _items(client, auth, pid, keys=("a", "b", "c", "d")):
    body = "key\n" + "\n".join(keys) + "\n"
    response = client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("items.csv", body)}
    )
    assert response.status_code == 201, response.text


def _export(client, auth, pid) -> list[tuple]:
    rows = client.get(f"{API}/projects/{pid}/triplets/export?format=json", headers=auth).json()
    return [(r["anchor"], r["closer"], r["farther"]) for r in rows]


def test_bad_triplet_rows_are_skipped_and_listed_when_asked(client, auth, project):
    pid = project["id"]
    _items(client, auth, pid)
    messy = (
        "anchor,closer,farther\n"
        "a,b,c\n"  # row 2: fine
        "a,a,c\n"  # row 3: repeats an item
        "a,zebra,c\n"  # row 4: unknown item
        "# a comment line\n"
        "a,b\n"  # row 6: a field short
        "b,c,d\n"  # row 7: fine
        "c,yak,b\n"  # row 8: unknown item
    )
    strict = client.post(
        f"{API}/projects/{pid}/triplets", headers=auth, files={"file": ("t.csv", messy)}
    )
    assert strict.status_code == 422 and _export(client, auth, pid) == []
    kept = client.post(
        f"{API}/projects/{pid}/triplets?on_error=skip",
        headers=auth,
        files={"file": ("t.csv", messy)},
    )
    assert kept.status_code == 201, kept.text
    body = kept.json()
    assert body["rows"] == 2 and body["skipped_rows"] == 4
    assert [(entry["row"], entry["column"]) for entry in body["skipped"]] == [
        (3, None),
        (4, "closer"),
        (6, None),
        (8, "closer"),
    ]
    assert body["skipped_by_reason"] == {
        "repeats an item": 1,
        "closer: unknown item": 2,
        "expected 3 fields, found 2": 1,
    }
    assert _export(client, auth, pid) == [("a", "b", "c"), ("b", "c", "d")]
    count = client.get(f"{API}/projects/{pid}", headers=auth).json()["triplet_count"]
    assert count == 2


def test_skipping_lists_up_to_the_limit_but_counts_every_row(client, auth, project, settings):
    pid = project["id"]
    _items(client, auth, pid)
    rows = [["a", "b", "c"]] + [["a", "nope", "c"]] * 120 + [["d", "c", "b"]]
    kept = client.post(
        f"{API}/projects/{pid}/triplets?on_error=skip",
        headers=auth,
        files={"file": ("t.json", json.dumps(rows))},
    )
    assert kept.status_code == 201, kept.text
    body = kept.json()
    assert body["rows"] == 2 and body["skipped_rows"] == 120
    assert len(body["skipped"]) == settings.max_upload_errors
    assert body["skipped_by_reason"] == {"closer: unknown item": 120}


def test_a_file_with_nothing_usable_or_a_wrong_header_is_still_refused(client, auth, project):
    pid = project["id"]
    _items(client, auth, pid)
    for name, content, expected in (
        ("t.csv", "anchor,closer,farther\na,a,b\nx,y,z\n", "no triplets in the file (2 rows"),
        ("t.csv", "anchor,closer\na,b\n", "farther"),
    ):
        refused = client.post(
            f"{API}/projects/{pid}/triplets?on_error=skip",
            headers=auth,
            files={"file": (name, content)},
        )
        assert refused.status_code == 422, refused.text
        assert expected in json.dumps(refused.json())
    assert _export(client, auth, pid) == []


def test_bad_item_rows_are_skipped_and_the_good_ones_stored(client, auth, project):
    pid = project["id"]
    _items(client, auth, pid, keys=("old",))
    messy = "key,label\nnew1,x\nnew1,y\nold,z\nbad/key,x\nnew2,y\n,x\n"
    kept = client.post(
        f"{API}/projects/{pid}/items?on_error=skip",
        headers=auth,
        files={"file": ("items.csv", messy)},
    )
    assert kept.status_code == 201, kept.text
    body = kept.json()
    assert body["rows"] == 2 and body["skipped_rows"] == 4
    assert sorted(entry["row"] for entry in body["skipped"]) == [3, 4, 5, 7]
    listed = client.get(f"{API}/projects/{pid}/items", headers=auth).json()["items"]
    assert sorted(item["key"] for item in listed) == ["new1", "new2", "old"]
    labels = {item["key"]: item["label"] for item in listed}
    assert labels["new1"] == "x"  # the first of the two rows with that key
