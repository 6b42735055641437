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
    assert body["rows"] == 2 and body["skipped_rows"] == 5
    assert sorted((entry["row"], entry["column"]) for entry in body["skipped"]) == [
        (3, None),
        (4, "closer"),
        (5, None),  # the comment: left out, and said so
        (6, None),
        (8, "closer"),
    ]
    assert body["skipped_by_reason"] == {
        "repeats an item; a triplet needs three different items": 1,
        "closer: unknown item": 2,
        "comment line: left out": 1,
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


def _item_keys(client, auth, pid) -> list[str]:
    listed = client.get(f"{API}/projects/{pid}/items?limit=1000", headers=auth).json()["items"]
    return sorted(item["key"] for item in listed)


def test_items_with_features_never_join_items_without_and_the_reverse(client, auth, project):
    """A project's items all have features of one length or none do. A file that breaks
    the rule in every row is one problem of the whole file, refused even when bad rows
    are skipped; a file that breaks it in some rows has those rows skipped or refused."""
    pid = project["id"]
    _items(client, auth, pid, keys=("a", "b", "c"))
    for on_error in ("reject", "skip"):
        refused = client.post(
            f"{API}/projects/{pid}/items?on_error={on_error}",
            headers=auth,
            files={"file": ("more.csv", "key,features\nx,1 2\ny,3 4\n")},
        )
        assert refused.status_code == 422, refused.text
        [problem] = refused.json()["detail"]
        assert (problem["file"], problem["row"], problem["column"]) == (
            "more.csv",
            None,
            "features",
        )
        assert problem["message"] == (
            "the file gives features, but the items the project holds (3) have none: a "
            "project's items all have features or none do (upload these without features, "
            "or into a new project)"
        )
    assert _item_keys(client, auth, pid) == ["a", "b", "c"]
    assert client.get(f"{API}/projects/{pid}", headers=auth).json()["feature_dim"] is None

    mixed = client.post(
        f"{API}/projects/{pid}/items?on_error=skip",
        headers=auth,
        files={"file": ("mixed.csv", "key,features\nd,\ne,1 2\nf,\n")},
    )
    assert mixed.status_code == 201, mixed.text
    assert [(p["row"], p["column"]) for p in mixed.json()["skipped"]] == [(3, "features")]
    assert _item_keys(client, auth, pid) == ["a", "b", "c", "d", "f"]

    # The reverse: a project whose items have two features each. Its first file holds the
    # rule within itself.
    other = client.post(f"{API}/projects", headers=auth, json={"name": "featured"}).json()["id"]
    mixed = client.post(
        f"{API}/projects/{other}/items",
        headers=auth,
        files={"file": ("first.csv", "key,features\na,\nb,1 2\n")},
    )
    assert [p["message"] for p in mixed.json()["detail"]] == [
        "has features but row 2 has none; give every item features or none"
    ]
    first = client.post(
        f"{API}/projects/{other}/items",
        headers=auth,
        files={"file": ("first.csv", "key,features\na,1 2\nb,3 4\n")},
    )
    assert first.status_code == 201
    for body, message in (
        (
            "key\nx\ny\nz\n",
            "the file gives no features, but the items the project holds (2) have 2 each: "
            "give every item 2 features",
        ),
        (
            "key,features\nx,1 2 3\ny,4 5 6\n",
            "no row has the 2 features that the items the project holds (2) have; row 2 has 3 features",
        ),
    ):
        refused = client.post(
            f"{API}/projects/{other}/items?on_error=skip",
            headers=auth,
            files={"file": ("more.csv", body)},
        )
        assert refused.status_code == 422, refused.text
        assert [p["message"] for p in refused.json()["detail"]] == [message]
    some = client.post(
        f"{API}/projects/{other}/items?on_error=skip",
        headers=auth,
        files={"file": ("some.csv", "key,features\nx,5 6\ny,\nz,1 2 3\n")},
    )
    assert some.status_code == 201, some.text
    assert {(p["row"], p["msg"]) for p in some.json()["skipped"]} == {
        (
            3,
            "some.csv, row 3, column 'features': missing; the project's existing items have 2 features",
        ),
        (
            4,
            "some.csv, row 4, column 'features': 3 features; the project's existing items have 2",
        ),
    }
    assert _item_keys(client, auth, other) == ["a", "b", "x"]


def test_the_skip_summary_counts_rows_by_what_went_wrong_without_their_values(
    client, auth, project
):
    pid = project["id"]
    messy = (
        "key,label,split,features\na,x,bogus,1\nb,,test,2\nc,y,train,1\nc,y,train,zz\nd,y,odd,1\n"
    )
    kept = client.post(
        f"{API}/projects/{pid}/items?on_error=skip",
        headers=auth,
        files={"file": ("items.csv", messy)},
    )
    assert kept.status_code == 201, kept.text
    assert kept.json()["skipped_by_reason"] == {
        "split: not one of train, test, unlabelled": 2,
        "split: needs a label": 1,
        "key: duplicate key": 1,
        "features: value 1 is not a finite number": 1,
    }
