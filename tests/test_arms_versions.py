"""A study's arms and its locked design versions, on both databases, over HTTP as a
lab runs them: participants allocated in balance (least filled, counting completed and
live sessions, a quiet one no longer after the lease), each arm seeing its own format,
question and items, the arm and version on every answer and export; the first answer
locks what raters see, and a change after it makes a numbered version."""

from __future__ import annotations

import csv
import io
import json
import random
from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from app.core.db import unit_of_work
from app.models import Judgement, Rater, Triplet
from app.models._types import utcnow
from tests.support.rating import answer, configure

API = "/api/v1"
KEYS = [f"k{number}" for number in range(12)]


@pytest.fixture
def study(client, auth, project):
    rows = "key,features\n" + "\n".join(f"{key},{n} {n % 3}" for n, key in enumerate(KEYS))
    uploaded = client.post(
        f"{API}/projects/{project['id']}/items", headers=auth, files={"file": ("i.csv", rows)}
    )
    assert uploaded.status_code == 201, uploaded.text
    configure(client, auth, project["id"], answers_per_rater=1, attention_rate=0)
    opened = client.put(
        f"{API}/projects/{project['id']}/link", headers=auth, json={"state": "open"}
    )
    assert opened.status_code == 200, opened.text
    return project["id"], opened.json()["public_slug"]


def _join(client, slug, pid: str):
    response = client.post(f"{API}/rate/{slug}/raters", json={"PROLIFIC_PID": pid})
    return response


def _token(joined) -> dict:
    return {"X-Rater-Token": joined.json()["rater_token"]}


def test_arms_fill_to_their_targets_with_a_fifth_dropping_out(app, client, auth, study):
    """3 arms x 100 completions; each newcomer drops out with probability 0.2 (joins,
    never answers). Quiet sessions are aged past the lease between rounds, as time
    would; the link fills every arm to its target and then takes nobody."""
    project_id, slug = study
    configure(
        client,
        auth,
        project_id,
        lease_seconds=60,
        arms=[{"name": name, "target": 100} for name in ("A", "B", "C")],
    )
    chance = random.Random(54)
    joined_at: Counter[str] = Counter()
    number = 0
    for _ in range(60):  # rounds; each sends a burst of newcomers at once
        burst = []
        for _ in range(30):
            number += 1
            joined = _join(client, slug, f"p{number}")
            if joined.status_code == 409:
                assert "This study is full" in joined.json()["detail"]
                break
            assert joined.status_code == 201, joined.text
            assert joined.json()["arm"] in ("A", "B", "C")
            joined_at[joined.json()["arm"]] += 1
            burst.append(joined)
        for joined in burst:
            if chance.random() < 0.2:
                continue  # dropped out: holds a place until the lease passes
            token = _token(joined)
            served = client.get(f"{API}/rate/{slug}/next", headers=token).json()
            done = answer(client, slug, token, served["comparison"]["query_id"]).json()
            assert done["complete"] and done["arm"] == joined.json()["arm"]
        with unit_of_work(app.state.session_factory) as session:  # the lease passes
            session.execute(
                update(Rater)
                .where(Rater.project_id == project_id, Rater.completed_at.is_(None))
                .values(last_seen_at=utcnow() - timedelta(seconds=61))
            )
        if not burst:
            break
    places = client.get(f"{API}/projects/{project_id}/participants/arms", headers=auth).json()
    assert [(arm["name"], arm["completed"]) for arm in places] == [
        ("A", 100),
        ("B", 100),
        ("C", 100),
    ]
    assert not any(arm["takes_newcomers"] for arm in places)
    refused = _join(client, slug, "late")
    assert refused.status_code == 409 and "This study is full" in refused.json()["detail"]
    assert "This study is full" in client.get(f"/r/{slug}?PROLIFIC_PID=late2").text
    # The participants list says each one's arm; the dropouts are abandoned.
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    completed = Counter(p["arm"] for p in listed if p["outcome"] == "completed")
    assert completed == {"A": 100, "B": 100, "C": 100}
    assert {p["outcome"] for p in listed} == {"completed", "abandoned"}
    exported = client.get(
        f"{API}/projects/{project_id}/participants/export", headers=auth
    ).content.decode("utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert Counter(r["arm"] for r in rows if r["outcome"] == "completed") == completed
    assert {r["version"] for r in rows} == {"1"}


def test_an_arm_asks_its_own_format_question_and_items(app, client, auth, study):
    project_id, slug = study
    configure(
        client,
        auth,
        project_id,
        answers_per_rater=3,
        random_share=1,
        arms=[
            {"name": "triplets", "question": "Which one is more like the top one?"},
            {"name": "odd", "judgement": "odd_one_out", "items": KEYS[:4]},
        ],
    )
    first, second = _join(client, slug, "t1"), _join(client, slug, "o1")
    assert (first.json()["arm"], second.json()["arm"]) == ("triplets", "odd")
    odd = _token(second)
    for _ in range(3):
        state = client.get(f"{API}/rate/{slug}/next", headers=odd).json()
        comparison = state["comparison"]
        assert comparison["format"] == "odd_one_out"
        assert {item["key"] for item in comparison["items"]} <= set(KEYS[:4])
        picked = client.post(
            f"{API}/rate/{slug}/answers",
            headers=odd,
            json={"query_id": comparison["query_id"], "picks": [comparison["items"][0]["key"]]},
        )
        assert picked.status_code == 200, picked.text
        assert picked.json()["arm"] == "odd" and picked.json()["version"] == 1
    served = client.get(f"{API}/rate/{slug}/next", headers=_token(first)).json()
    assert served["comparison"]["anchor"] is not None  # a triplet
    answer(client, slug, _token(first), served["comparison"]["query_id"])
    # The pages show each arm its own question.
    page = client.post(f"/r/{slug}/start", data={"PROLIFIC_PID": "t1"}, follow_redirects=True)
    assert "Which one is more like the top one?" in page.text
    with unit_of_work(app.state.session_factory) as session:
        judged = session.scalars(select(Judgement.arm).where(Judgement.project_id == project_id))
        assert set(judged) == {"odd"}
        recorded = session.execute(
            select(Triplet.arm, Triplet.design_version).where(Triplet.project_id == project_id)
        ).all()
    assert {arm for arm, _ in recorded} == {"odd", "triplets"}
    assert {version for _, version in recorded} == {1}
    exported = client.get(
        f"{API}/projects/{project_id}/triplets/export?format=json", headers=auth
    ).json()
    assert Counter(row["arm"] for row in exported) == Counter(arm for arm, _ in recorded)
    # The judgements' export says each one's arm and version, and uploads again with them.
    judgements = client.get(f"{API}/projects/{project_id}/judgements/export", headers=auth)
    table = list(csv.DictReader(io.StringIO(judgements.content.decode("utf-8-sig"))))
    assert [(row["arm"], row["version"]) for row in table] == [("odd", "1")] * 3
    listed = client.get(
        f"{API}/projects/{project_id}/judgements/export?format=json", headers=auth
    ).json()
    assert [(row["arm"], row["version"]) for row in listed] == [("odd", 1)] * 3
    copy = client.post(f"{API}/projects", headers=auth, json={"name": "copy"}).json()["id"]
    items = "key\n" + "".join(f"{key}\n" for key in KEYS)
    client.post(
        f"{API}/projects/{copy}/items", headers=auth, files={"file": ("i.csv", items)}
    ).raise_for_status()
    again = client.post(
        f"{API}/projects/{copy}/judgements",
        headers=auth,
        files={"file": ("judgements.csv", judgements.content)},
    )
    assert again.status_code == 201, again.text
    with unit_of_work(app.state.session_factory) as session:
        kept = session.execute(
            select(Judgement.arm, Judgement.design_version).where(Judgement.project_id == copy)
        ).all()
        implied = session.execute(
            select(Triplet.arm, Triplet.design_version).where(Triplet.project_id == copy)
        ).all()
    assert kept == [("odd", 1)] * 3 and set(implied) == {("odd", 1)} and len(implied) == 6


def test_bad_arms_are_refused_naming_the_arm_and_field(client, auth, study):
    project_id, _ = study
    url = f"{API}/projects/{project_id}/rating"
    cases = [
        ([{"name": "A"}, {"name": "A"}], "two arms are named 'A'"),
        (
            [{"name": "A", "items": ["k1", "nowhere"]}],
            "arms[A].items: the study has no item 'nowhere'",
        ),
        (
            [{"name": "A", "judgement": "rank", "shown": 4, "picks": 4}],
            "arms[A]: picks must be fewer",
        ),
        (
            [{"name": "A", "judgement": "rank", "items": KEYS[:3]}],
            "arms[A].items: a rank screen shows",
        ),
        ([{"name": "A", "target": 0}], "target"),
        ([{"name": ""}], "name"),
    ]
    for arms, said in cases:
        refused = client.patch(url, headers=auth, json={"arms": arms})
        assert 400 <= refused.status_code < 500, refused.text
        assert said in json.dumps(refused.json()), (said, refused.text)
    assert client.get(url, headers=auth).json()["arms"] is None  # nothing was saved


def test_the_first_answer_locks_the_design_and_a_change_makes_a_version(app, client, auth, study):
    project_id, slug = study
    versions_url = f"{API}/projects/{project_id}/versions"
    configure(client, auth, project_id, question="Which is closer to the top one?")
    listed = client.get(versions_url, headers=auth).json()
    assert [(v["number"], v["locked"]) for v in listed] == [(1, False)]
    assert listed[0]["design"]["question"] == "Which is closer to the top one?"
    configure(client, auth, project_id, question="Before any answer: still version 1")
    assert len(client.get(versions_url, headers=auth).json()) == 1

    joined = _join(client, slug, "v1")
    served = client.get(f"{API}/rate/{slug}/next", headers=_token(joined)).json()
    assert served["version"] == 1
    answer(client, slug, _token(joined), served["comparison"]["query_id"])
    assert client.get(versions_url, headers=auth).json()[0]["locked"]
    configure(client, auth, project_id, quota=50)  # not what raters see: no new version
    assert len(client.get(versions_url, headers=auth).json()) == 1

    configure(client, auth, project_id, question="Which looks more alike?", blocks=1)
    listed = client.get(versions_url, headers=auth).json()
    assert [(v["number"], v["current"]) for v in listed] == [(1, False), (2, True)]
    assert listed[1]["changes"] == [
        "question: 'Before any answer: still version 1' → 'Which looks more alike?'"
    ]
    later = _join(client, slug, "v2")
    served = client.get(f"{API}/rate/{slug}/next", headers=_token(later)).json()
    assert served["version"] == 2
    answer(client, slug, _token(later), served["comparison"]["query_id"])
    # New items are a change of what raters see too.
    extra = client.post(
        f"{API}/projects/{project_id}/items",
        headers=auth,
        files={"file": ("more.csv", "key,features\nnew1,9 9\n")},
    )
    assert extra.status_code == 201, extra.text
    listed = client.get(versions_url, headers=auth).json()
    assert listed[-1]["number"] == 3 and listed[-1]["changes"] == ["items: 12 → 13"]
    exported = client.get(
        f"{API}/projects/{project_id}/triplets/export?format=json", headers=auth
    ).json()
    assert [row["version"] for row in exported] == [1, 2]
    participants = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert [(p["participant"], p["version"]) for p in participants] == [("v1", 1), ("v2", 2)]


def test_the_settings_page_sets_arms_row_by_row(app, client, auth, study):
    from fastapi.testclient import TestClient

    from tests.support.workspace import page_csrf, signed_in_browser

    project_id, _ = study
    with TestClient(app) as browser:
        signed_in_browser(browser, token=auth["Authorization"].split()[1])
        settings = f"/projects/{project_id}/settings"
        assert 'name="arm-0-name"' in browser.get(settings).text
        rows = {
            "arm-0-name": "control",
            "arm-0-target": "50",
            "arm-0-open": "on",
            "arm-0-random_share": "1",  # "How it asks": only at random
            "arm-1-name": "odd",
            "arm-1-target": "",
            "arm-1-judgement": "odd_one_out",
            "arm-1-items": "k0, k1\nk2",
            "arm-1-open": "on",
        }
        bad = browser.post(
            settings,
            data={"csrf_token": page_csrf(browser, settings), **rows, "arm-0-target": "-3"},
        )
        assert bad.status_code == 422 and "Arms: " in bad.text and "target" in bad.text
        saved = browser.post(settings, data={"csrf_token": page_csrf(browser, settings), **rows})
        assert saved.status_code == 200 and "Saved" in saved.text, saved.text[-2000:]
        assert 'value="control"' in saved.text  # shown back as saved
        assert '<option value="1" selected>only at random' in saved.text
    arms = client.get(f"{API}/projects/{project_id}/rating", headers=auth).json()["arms"]
    assert [
        (a["name"], a["target"], a.get("judgement"), a.get("items"), a["random_share"])
        for a in arms
    ] == [
        ("control", 50, None, None, 1.0),
        ("odd", None, "odd_one_out", ["k0", "k1", "k2"], None),
    ]


def test_the_archive_carries_the_arms_and_each_answers_arm_and_version(app, client, auth, study):
    project_id, slug = study
    arms = [{"name": "A", "items": KEYS[:5]}, {"name": "B", "judgement": "odd_one_out"}]
    configure(client, auth, project_id, arms=arms)
    for pid in ("a1", "b1"):
        joined = _join(client, slug, pid)
        comparison = client.get(f"{API}/rate/{slug}/next", headers=_token(joined)).json()[
            "comparison"
        ]
        if comparison["format"] == "odd_one_out":  # arm B: a screen, kept as a judgement
            picked = client.post(
                f"{API}/rate/{slug}/answers",
                headers=_token(joined),
                json={"query_id": comparison["query_id"], "picks": [comparison["items"][0]["key"]]},
            )
            assert picked.status_code == 200, picked.text
        else:
            answer(client, slug, _token(joined), comparison["query_id"])
    configure(client, auth, project_id, question="Which is more alike?")  # version 2
    archive = client.get(f"{API}/projects/{project_id}/archive", headers=auth)
    made = client.post(
        f"{API}/project-archives", headers=auth, files={"file": ("a.zip", archive.content)}
    )
    assert made.status_code == 201, made.text
    copy = made.json()["id"]
    rating = client.get(f"{API}/projects/{copy}/rating", headers=auth).json()
    assert [arm["name"] for arm in rating["arms"]] == ["A", "B"]
    assert rating["arms"][0]["items"] == KEYS[:5]

    def answers(pid):
        rows = client.get(f"{API}/projects/{pid}/triplets/export?format=json", headers=auth)
        return sorted((row["arm"], row["version"], row["rater"]) for row in rows.json())

    assert answers(copy) == answers(project_id) == [("A", 1, "a1"), ("B", 1, "b1"), ("B", 1, "b1")]

    def judged(pid):
        with unit_of_work(app.state.session_factory) as session:
            return session.execute(
                select(Judgement.arm, Judgement.design_version).where(Judgement.project_id == pid)
            ).all()

    assert judged(copy) == judged(project_id) == [("B", 1)]

    def versions(pid):
        listed = client.get(f"{API}/projects/{pid}/versions", headers=auth).json()
        return [(v["number"], v["changes"], v["design"]["question"]) for v in listed]

    assert versions(copy) == versions(project_id)
    assert [number for number, _, _ in versions(copy)] == [1, 2]
    assert versions(copy)[1][2] == "Which is more alike?"


def test_a_model_fits_on_one_arm_or_on_all(app, client, auth, study):
    """Answers of arms A and B (uploaded with their arm); a model of arm A fits on A's
    answers only, one without an arm on all; an arm the study lacks is refused."""
    from app.worker.loop import Worker

    project_id, _ = study
    configure(client, auth, project_id, arms=[{"name": "A"}, {"name": "B"}])
    chance = random.Random(7)
    rows = ["anchor,closer,farther,arm"]
    for arm, count in (("A", 240), ("B", 120)):
        for _ in range(count):
            a, b, c = chance.sample(KEYS, 3)
            rows.append(f"{a},{b},{c},{arm}")
    uploaded = client.post(
        f"{API}/projects/{project_id}/triplets",
        headers=auth,
        files={"file": ("t.csv", "\n".join(rows))},
    )
    assert uploaded.status_code == 201, uploaded.text
    refused = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={"name": "z", "kind": "tete", "arm": "Z", "params": {"max_iter": 50}},
    )
    assert refused.status_code == 400
    assert "arm: the study has no arm 'Z' (its arms: A, B)" in refused.text
    made = {}
    for name, arm in (("only-a", "A"), ("all", None)):
        created = client.post(
            f"{API}/projects/{project_id}/models",
            headers=auth,
            json={"name": name, "kind": "tete", "arm": arm, "params": {"max_iter": 50}},
        )
        assert created.status_code == 201, created.text
        assert created.json()["arm"] == arm
        made[name] = created.json()["id"]
    Worker(app.state.session_factory).run(until_idle=True)
    fitted = {}
    for name, model_id in made.items():
        model = client.get(f"{API}/projects/{project_id}/models/{model_id}", headers=auth).json()
        serving = model["serving"]
        assert serving is not None, model["latest"]
        fitted[name] = serving["answers_count"] + serving["heldout_count"]
    assert fitted == {"only-a": 240, "all": 360}
    # 120 more answers of arm B: the model of all arms grew by a third and refits; the
    # model of arm A has nothing new and waits.
    from app.training.jobs import refit_check

    more = ["anchor,closer,farther,arm"] + [
        ",".join([*chance.sample(KEYS, 3), "B"]) for _ in range(120)
    ]
    client.post(
        f"{API}/projects/{project_id}/triplets",
        headers=auth,
        files={"file": ("more.csv", "\n".join(more))},
    ).raise_for_status()
    refit_check(app.state.session_factory)
    Worker(app.state.session_factory).run(until_idle=True)
    numbers = {
        name: client.get(f"{API}/projects/{project_id}/models/{model_id}", headers=auth).json()[
            "serving"
        ]["number"]
        for name, model_id in made.items()
    }
    assert numbers == {"only-a": 1, "all": 2}
    archive = client.get(f"{API}/projects/{project_id}/archive", headers=auth)
    restored = client.post(
        f"{API}/project-archives", headers=auth, files={"file": ("a.zip", archive.content)}
    )
    assert restored.status_code == 201, restored.text
    copy = restored.json()["id"]
    models = client.get(f"{API}/projects/{copy}/models", headers=auth).json()
    assert sorted((m["name"], m["arm"]) for m in models) == [("all", None), ("only-a", "A")]


def test_a_newcomer_reads_their_arms_instructions_before_its_first_screen(client, auth, study):
    """The link's page shows the study's instructions (the arm is allocated on Start);
    an arm with words of its own shows them next, and Continue goes on to its screens
    without joining again."""
    project_id, slug = study
    configure(
        client,
        auth,
        project_id,
        instructions="Compare the shapes.",
        arms=[{"name": "A", "target": 1, "instructions": "Look at the colours only."}],
    )
    landing = client.get(f"/r/{slug}?participant=n1")
    assert "Compare the shapes." in landing.text
    started = client.post(f"/r/{slug}/start", data={"participant": "n1"}, follow_redirects=False)
    assert started.status_code == 303 and started.headers["location"] == f"/r/{slug}"
    briefed = client.get(f"/r/{slug}")
    assert "Look at the colours only." in briefed.text
    assert f'href="/r/{slug}/rate"' in briefed.text  # Continue: the session goes on
    assert 'action="/r/' not in briefed.text
    with client.app.state.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Rater)) == 1
