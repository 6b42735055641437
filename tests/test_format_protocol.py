"""A judgement format is one module and one template (app/formats): a format no part of
the service knows ("which of three is the middle one?", tests/support/middle_format.py
and its template) is offered in the settings, served and drawn on the rater's page,
answered by the API, the page and the simulated crowd, checked as an attention check,
exported, uploaded again, and learned from, on both databases. And no code outside the
format modules branches on a format's name."""

from __future__ import annotations

import ast
import csv
import io
import random
import re

import numpy as np
import pytest

from app import formats
from app.models import Judgement, Rater, Triplet
from app.simulate import _Items
from app.worker.loop import Worker
from tests.support.code import comparisons, template_lines
from tests.support.links import open_link
from tests.support.middle_format import MIDDLE
from tests.support.models import create_model, get_model
from tests.support.screens import answer_screen, join_rater, next_screen, rows_of, set_rating
from tests.support.uploads import upload
from tests.support.workspace import signed_in_page_csrf

API = "/api/v1"
POSITIONS = np.arange(12, dtype=float)  # items on a line: the middle one is plain


@pytest.fixture
def middle():
    with formats.registered(MIDDLE) as registered:
        yield registered


def _line_items(client, auth, project_id: int) -> list[dict]:
    rows = "key,text,features\n" + "".join(f"m{i},word {i},{x}\n" for i, x in enumerate(POSITIONS))
    assert upload(client, auth, project_id, "items", "line.csv", rows).status_code == 201
    return [{"key": f"m{i}", "features": [x]} for i, x in enumerate(POSITIONS)]


def test_a_format_written_as_one_module_is_served_answered_exported_and_learned(
    middle, app, client, auth, project
):
    pid = project["id"]
    exported_items = _line_items(client, auth, pid)
    settings = set_rating(
        client, auth, pid, judgement="middle", attention_rate=0.2, answers_per_rater=0
    )
    assert settings.status_code == 200, settings.text
    assert settings.json()["question"] == "Which one lies between the other two?"
    unknown = set_rating(client, auth, pid, judgement="middlest")
    assert unknown.status_code == 422
    assert "triplet, odd_one_out, rank, middle" in unknown.text
    # The settings page offers it, in its own words.
    signed_in_page_csrf(client, auth, f"/projects/{pid}/settings")
    page = client.get(f"/projects/{pid}/settings")
    assert "Middle one: which of three lies between the other two?" in page.text
    slug = open_link(client, auth, pid)["public_slug"]

    # Served and answered through the API, by the simulated crowd's rule for it. The
    # scheduler's draws are seeded: which 96 of 220 screens the line is learned from
    # decides whether each neighbouring pair's order is asked at all (one run in a few
    # hundred left one unasked in the training share and asked in the held-out one).
    app.state.scheduler_random = random.Random(20261207)
    crowd = _Items(exported_items, noise=0.0, seed=0)
    token = join_rater(client, slug)
    screen = next_screen(client, slug, token)
    assert screen["format"] == "middle" and len(screen["items"]) == 3
    assert screen["picks"] == 1 and screen["reference"] is None
    wrong = answer_screen(client, slug, token, screen["query_id"], choice="left")
    assert wrong.status_code == 422
    assert "this query is a middle-one screen" in wrong.json()["detail"]
    for _ in range(150):
        body = crowd.choose(screen)
        answered = answer_screen(client, slug, token, screen["query_id"], **body)
        assert answered.status_code == 200, answered.text
        screen = answered.json()["comparison"]
    (rater,) = rows_of(app, Rater, pid)
    assert rater.answers == 150
    assert rater.attention_passed > 10 and rater.attention_failed == 0  # its own checks

    judgements = rows_of(app, Judgement, pid)
    assert judgements and {row.format.name for row in judgements} == {"middle"}
    first = judgements[0]
    (middle_one,) = first.chosen
    ends = [item for item in first.shown if item != middle_one]
    implied = sorted(
        (row.anchor_id, row.closer_id, row.farther_id)
        for row in rows_of(app, Triplet, pid)
        if row.judgement_id == first.id
    )
    assert implied == sorted([(ends[0], middle_one, ends[1]), (ends[1], middle_one, ends[0])])

    # Drawn on the rater's page by its template, and answered there with a tap (no
    # check now: the answer is a judgement).
    assert set_rating(client, auth, pid, attention_rate=0).status_code == 200
    client.cookies.clear()
    instructions = client.get(f"/r/{slug}")
    assert "lies <strong>between</strong> the other two" in instructions.text
    rated = client.post(f"/r/{slug}/start", data={"participant": "p1"})
    assert 'aria-label="Tap the middle one"' in rated.text
    assert "Which one lies between the other two?" in rated.text
    query_id = re.search(r'name="query_id" value="(\d+)"', rated.text).group(1)
    tapped = re.search(r'name="picks" value="([^"]+)"', rated.text).group(1)
    after = client.post(
        f"/r/{slug}/answer", data={"query_id": query_id, "picks": tapped, "response_time_ms": "800"}
    )
    assert after.status_code == 200, after.text
    assert len(rows_of(app, Rater, pid)) == 2

    # Exported in the judgement files' layout, and uploaded again as the same judgements.
    exported = client.get(f"{API}/projects/{pid}/judgements/export", headers=auth)
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert {row["format"] for row in rows} == {"middle"} and len(rows) == len(judgements) + 1
    copy = client.post(f"{API}/projects", headers=auth, json={"name": "copy"}).json()["id"]
    _line_items(client, auth, copy)
    again = upload(client, auth, copy, "judgements", "judgements.csv", exported.text)
    assert again.status_code == 201, again.text
    assert again.json()["rows"] == len(rows)
    assert len(rows_of(app, Triplet, copy)) == 2 * len(rows)
    bad = upload(
        client, auth, copy, "judgements", "bad.csv", "format,item1,item2,pick1\nmiddle,m1,m2,m1\n"
    )
    assert bad.status_code == 422, bad.text
    assert "a middle-one screen shows 3 items and picks 1; got 2 and 1" in bad.text

    # Learned from: an embedding of the line that orders held-out answers right.
    model = create_model(
        client,
        auth,
        pid,
        name="line",
        kind="tete",
        params={"n_components": 1, "max_iter": 300, "heldout_share": 0.2},
    )
    Worker(app.state.session_factory).run(until_idle=True)
    version = get_model(client, auth, pid, model["id"])["serving"]
    assert version["status"] == "ready", version
    assert version["heldout_count"] > 0
    assert version["metrics"]["heldout_triplet_error"] < 0.1, version["metrics"]


def test_no_module_outside_the_formats_branches_on_a_format_name():
    """A comparison with a format's name (`format == "rank"`, `is RANK`) outside
    app/formats would be knowledge of a format kept elsewhere; the templates likewise."""
    names = {format.name for format in formats.every()}
    constants = {format.name.upper() for format in formats.every()}

    def names_a_format(side: ast.expr) -> bool:
        if isinstance(side, ast.Constant):
            return side.value in names
        return getattr(side, "id", None) in constants or getattr(side, "attr", None) in constants

    listed = "|".join(sorted(names))
    found = comparisons(names_a_format, skip={"formats", "learn"})
    found += template_lines(rf"""==\s*["']({listed})["']""", skip={"formats"})
    assert found == []
