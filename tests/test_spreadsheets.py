"""CSV downloads are safe to open in a spreadsheet, and still upload as they are."""

from __future__ import annotations

import csv
import io
import json

from sqlalchemy import literal, select

from app.core.spreadsheets import from_spreadsheet, spreadsheet_safe, spreadsheet_safe_sql
from tests.support.links import open_link

API = "/api/v1"
TRICKY = [
    '=HYPERLINK("http://evil.example","click")',
    "+1+2",
    "-2",
    "@SUM(A1)",
    "\tindented",
    "\rreturned",
    "plain",
    "'quoted",
    "a=b",
    "#3",
    "",
]


def test_the_database_and_python_quote_the_same_cells(app):
    """The one rule, twice: SQL for the exports the database writes, Python for the rest."""
    with app.state.session_factory() as session:
        for value in TRICKY:
            in_sql = session.scalar(select(spreadsheet_safe_sql(literal(value))))
            assert in_sql == spreadsheet_safe(value), value
            assert from_spreadsheet(spreadsheet_safe(value)) == value


def test_csv_downloads_quote_formulas_and_json_keeps_the_values(client, auth, project):
    project_id = project["id"]
    items = [
        {"key": "=cmd|' -C calc'!A0", "label": "@evil", "text": "+SUM(1)"},
        {"key": "-minus", "label": "ok", "text": "-dash"},
        {"key": "plain", "label": "ok", "text": "fine"},
    ]
    uploaded = client.post(
        f"{API}/projects/{project_id}/items",
        headers=auth,
        files={"file": ("items.json", json.dumps(items))},
    )
    assert uploaded.status_code == 201, uploaded.text
    slug = open_link(client, auth, project_id)["public_slug"]
    client.patch(f"{API}/projects/{project_id}/rating", headers=auth, json={"attention_rate": 0})
    joined = client.post(
        f"{API}/rate/{slug}/raters", json={"participant": '=HYPERLINK("http://x","y")'}
    ).json()
    token = {"X-Rater-Token": joined["rater_token"]}
    joined = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    answered = client.post(
        f"{API}/rate/{slug}/answers",
        headers=token,
        json={"query_id": joined["comparison"]["query_id"], "choice": "left"},
    )
    assert answered.status_code == 200

    exported = client.get(f"{API}/projects/{project_id}/items/export?format=csv", headers=auth)
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [row["key"] for row in rows] == ["'=cmd|' -C calc'!A0", "'-minus", "plain"]
    assert rows[0]["label"] == "'@evil" and rows[0]["text"] == "'+SUM(1)"
    assert rows[1]["text"] == "'-dash"
    raw = client.get(f"{API}/projects/{project_id}/items/export?format=json", headers=auth).json()
    assert [item["key"] for item in raw] == [item["key"] for item in items]

    triplets = client.get(f"{API}/projects/{project_id}/triplets/export?format=csv", headers=auth)
    row = next(csv.DictReader(io.StringIO(triplets.text)))
    assert row["rater"] == '\'=HYPERLINK("http://x","y")'
    assert all(not row[role].startswith(("=", "+", "-", "@")) for role in row)
    as_json = client.get(f"{API}/projects/{project_id}/triplets/export?format=json", headers=auth)
    assert as_json.json()[0]["rater"] == '=HYPERLINK("http://x","y")'

    # The CSV downloads upload again as they are: the quotes come off.
    copy = client.post(f"{API}/projects", headers=auth, json={"name": "copy"}).json()["id"]
    again = client.post(
        f"{API}/projects/{copy}/items", headers=auth, files={"file": ("i.csv", exported.text)}
    )
    assert again.status_code == 201, again.text
    copied = client.get(f"{API}/projects/{copy}/items/export?format=json", headers=auth).json()
    assert copied == raw
    moved = client.post(
        f"{API}/projects/{copy}/triplets", headers=auth, files={"file": ("t.csv", triplets.text)}
    )
    assert moved.status_code == 201, moved.text
    back = client.get(f"{API}/projects/{copy}/triplets/export?format=json", headers=auth).json()
    assert [(t["anchor"], t["closer"], t["farther"]) for t in back] == [
        (t["anchor"], t["closer"], t["farther"]) for t in as_json.json()
    ]


def test_lines_starting_with_a_hash_are_comments_and_a_hash_key_survives_a_round_trip(
    client, auth, project
):
    project_id = project["id"]
    items = (
        "# exported from our lab's sheet, 2026-11-01\nkey,label\n# the shapes\n#3,odd\nplain,even\n"
    )
    uploaded = client.post(
        f"{API}/projects/{project_id}/items", headers=auth, files={"file": ("i.csv", items)}
    )
    assert uploaded.status_code == 201, uploaded.text
    assert uploaded.json()["rows"] == 1  # '#3,odd' is a comment as written
    quoted = "key,label\n'#3,odd\n"
    again = client.post(
        f"{API}/projects/{project_id}/items", headers=auth, files={"file": ("q.csv", quoted)}
    )
    assert again.status_code == 201, again.text
    exported = client.get(f"{API}/projects/{project_id}/items/export?format=csv", headers=auth)
    assert "'#3,odd" in exported.text
    keys = [
        i["key"]
        for i in client.get(f"{API}/projects/{project_id}/items", headers=auth).json()["items"]
    ]
    assert sorted(keys) == ["#3", "plain"]
    triplets = "anchor,closer,farther\n# a note\nplain,'#3,plain\n"
    bad = client.post(
        f"{API}/projects/{project_id}/triplets", headers=auth, files={"file": ("t.csv", triplets)}
    )
    # Row numbers stay those of the file: the note is line 2, the answer line 3.
    assert bad.status_code == 422 and bad.json()["detail"][0]["row"] == 3


def test_only_an_unquoted_hash_makes_a_comment_and_each_comment_is_counted(client, auth, project):
    """A quoted "#…" is a value like any other; a line that starts with a bare # is a
    comment, left out, and listed with the rows left out, so no row vanishes silently."""
    items = 'key,label\n"#quoted",a\n#bare,a\n"# spaced",a\nplain,b\n'
    uploaded = client.post(
        f"{API}/projects/{project['id']}/items", headers=auth, files={"file": ("i.csv", items)}
    )
    assert uploaded.status_code == 201, uploaded.text
    body = uploaded.json()
    assert body["rows"] == 3 and body["skipped_rows"] == 1
    assert [(entry["row"], entry["msg"]) for entry in body["skipped"]] == [
        (3, "i.csv, row 3: comment line (starts with an unquoted #): left out")
    ]
    listed = client.get(f"{API}/projects/{project['id']}/items", headers=auth).json()["items"]
    assert sorted(item["key"] for item in listed) == ["# spaced", "#quoted", "plain"]


def _upload(client, auth, project_id, what: str, name: str, content: bytes):
    return client.post(
        f"{API}/projects/{project_id}/{what}", headers=auth, files={"file": (name, content)}
    )


def _messages(response) -> list[str]:
    detail = response.json()["detail"]
    return [detail] if isinstance(detail, str) else [problem["message"] for problem in detail]


def test_excels_csv_uploads_as_it_is(client, auth, project):
    """Saved by Excel as "CSV UTF-8": a byte-order mark, CRLF line ends, empty cells past
    the last column in every row and empty rows at the end (the cells Excel once
    formatted), for items and for answers alike."""
    pid = project["id"]
    items = (
        "\ufeffkey,label,,\r\nred,warm,,\r\norange,warm,,\r\nblue,cold,,\r\nteal,cold,,\r\n"
        ",,,\r\n,,,\r\n"
    ).encode()
    stored = _upload(client, auth, pid, "items", "colours.csv", items)
    assert stored.status_code == 201, stored.text
    assert stored.json()["rows"] == 4
    answers = "\ufeffanchor,closer,farther,\r\nred,orange,blue,\r\nteal,blue,red,\r\n,,,\r\n"
    stored = _upload(client, auth, pid, "triplets", "answers.csv", answers.encode())
    assert stored.status_code == 201, stored.text
    assert stored.json()["rows"] == 2
    # An empty row between rows of data is still a row at fault, named.
    gap = b"key,label,\r\nviolet,cold,\r\n,,\r\nindigo,cold,\r\n"
    refused = _upload(client, auth, pid, "items", "gap.csv", gap)
    assert refused.status_code == 422
    assert [(p["row"], p["message"]) for p in refused.json()["detail"]] == [(3, "key is required")]


def test_what_excel_saves_otherwise_is_refused_saying_what_to_do(client, auth, project):
    pid = project["id"]
    cases = {
        # Excel's plain "CSV" on Windows: the code page, not UTF-8.
        "cp1252.csv": ("key,text\ncafé,crème brûlée\n".encode("cp1252"), 422, "not UTF-8 text"),
        # Excel's CSV where the decimal mark is a comma.
        "semicolons.csv": (b"key;label\na;x\nb;y\n", 422, "separated by semicolons"),
        # A workbook, and one renamed to .csv.
        "items.xlsx": (b"PK\x03\x04workbook", 415, "spreadsheet workbook"),
        "renamed.csv": (b"PK\x03\x04workbook", 422, "spreadsheet workbook"),
        "old.xls": (b"\xd0\xcf\x11\xe0\xa1\xb1", 415, "spreadsheet workbook"),
    }
    for name, (content, status, words) in cases.items():
        response = _upload(client, auth, pid, "items", name, content)
        assert response.status_code == status, (name, response.text)
        [message] = _messages(response)
        assert words in message and "CSV UTF-8" in message, (name, message)
    answers = _upload(client, auth, pid, "triplets", "a.xlsx", b"PK\x03\x04")
    assert answers.status_code == 415 and "CSV UTF-8" in answers.json()["detail"]
    items = client.get(f"{API}/projects/{pid}", headers=auth).json()["item_count"]
    assert items == 0
