"""Practice screens before the task, on both databases, through the rater API and the
rating pages: screens of the study's format with a known answer and feedback after
each, answers stored apart (never in triplets, judgements, counts or builds), a pass
mark that sends those below it down the screened-out path, and bad practice settings
refused naming the screen and field."""

from __future__ import annotations

import csv
import io

import pytest
from sqlalchemy import func, select

from app.models import Assignment, PracticeAnswer, Rater, Triplet
from tests.support.rating import answer, configure

API = "/api/v1"
KEYS = ["circle", "oval", "square", "triangle", "star", "moon"]
TRIPLET_PRACTICE = {
    "trials": [
        {"items": ["circle", "oval", "square"], "answer": ["oval"]},
        {"items": ["square", "circle", "triangle"], "answer": ["triangle"]},
        {"items": ["star", "moon", "oval"], "answer": ["moon"]},
    ],
    "pass_at_least": 2,
}


@pytest.fixture
def study(client, auth, project):
    rows = "key,text,features\n" + "\n".join(
        f"{key},A {key},{n} {n % 2}" for n, key in enumerate(KEYS)
    )
    uploaded = client.post(
        f"{API}/projects/{project['id']}/items", headers=auth, files={"file": ("i.csv", rows)}
    )
    assert uploaded.status_code == 201, uploaded.text
    configure(
        client,
        auth,
        project["id"],
        answers_per_rater=2,
        attention_rate=0,
        completion_code="DONE-2",
        screened_out_code="PRACTICE-FAIL",
        screened_out_url="https://example.org/screened",
        practice=TRIPLET_PRACTICE,
    )
    opened = client.put(
        f"{API}/projects/{project['id']}/link", headers=auth, json={"state": "open"}
    )
    assert opened.status_code == 200, opened.text
    return project["id"], opened.json()["public_slug"]


def _join(client, slug, participant: str) -> dict:
    joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": participant})
    assert joined.status_code == 201, joined.text
    assert joined.json()["step"] == "practice"
    return {"X-Rater-Token": joined.json()["rater_token"]}


def _count(app, model, project_id) -> int:
    with app.state.session_factory() as session:
        return session.scalar(
            select(func.count()).select_from(model).where(model.project_id == project_id)
        )


def _side(comparison: dict, key: str) -> str:
    return "left" if comparison["left"]["key"] == key else "right"


def test_practice_gives_feedback_and_is_never_counted(app, client, auth, study):
    project_id, slug = study
    rater = _join(client, slug, "p1")
    shown = client.get(f"{API}/rate/{slug}/next", headers=rater).json()
    assert shown["step"] == "practice"
    assert (shown["practice_screen"], shown["practice_screens"]) == (1, 3)
    comparison = shown["comparison"]
    assert comparison["practice"] is True
    assert [comparison[role]["key"] for role in ("anchor", "left", "right")] == [
        "circle",
        "oval",
        "square",
    ]
    # Wrong: told what was expected, by the item's text.
    wrong = answer(client, slug, rater, comparison["query_id"], choice="right")
    assert wrong.status_code == 200, wrong.text
    feedback = wrong.json()["feedback"]
    assert feedback == {
        "correct": False,
        "expected": ["oval"],
        "given": ["square"],
        "message": "Not quite: the expected answer was “A oval”.",
    }
    # Sent again (a lost response): the same feedback, nothing recorded twice.
    again = answer(client, slug, rater, comparison["query_id"], choice="left")
    assert again.json()["feedback"]["correct"] is False
    assert again.json()["replayed"] is True
    assert again.json()["practice_screen"] == 2
    second = again.json()["comparison"]
    right = answer(client, slug, rater, second["query_id"], choice=_side(second, "triangle"))
    assert right.json()["feedback"]["message"] == "Correct!"
    third = right.json()["comparison"]
    # A screen other than the one due is refused.
    early = answer(client, slug, rater, second["query_id"] + 5, choice="left")
    assert early.status_code == 404, early.text
    last = answer(client, slug, rater, third["query_id"], choice=_side(third, "moon"))
    state = last.json()
    assert state["feedback"]["correct"] is True
    assert state["step"] == "task"
    assert state["comparison"]["practice"] is False
    assert state["answered"] == 0
    # Nothing of the practice reached the study's answers.
    assert _count(app, Triplet, project_id) == 0
    assert _count(app, PracticeAnswer, project_id) == 3
    with app.state.session_factory() as session:
        stored = session.scalar(select(Rater).where(Rater.project_id == project_id))
        assert (stored.answers, stored.practice_answered, stored.practice_correct) == (0, 3, 2)
    task = answer(client, slug, rater, state["comparison"]["query_id"])
    assert task.json()["answered"] == 1 and task.json()["feedback"] is None
    assert _count(app, Triplet, project_id) == 1
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert (listed[0]["practice_answered"], listed[0]["practice_correct"]) == (3, 2)
    exported = client.get(f"{API}/projects/{project_id}/participants/export", headers=auth)
    row = next(csv.DictReader(io.StringIO(exported.content.decode("utf-8-sig"))))
    assert (row["practice_answered"], row["practice_correct"]) == ("3", "2")
    # The archive carries the practice and each participant's practice tally.
    archive = client.get(f"{API}/projects/{project_id}/archive", headers=auth)
    made = client.post(
        f"{API}/project-archives", headers=auth, files={"file": ("a.zip", archive.content)}
    )
    assert made.status_code == 201, made.text
    copy = made.json()["id"]
    assert client.get(f"{API}/projects/{copy}/rating", headers=auth).json()["practice"] == (
        TRIPLET_PRACTICE
    )
    copied = client.get(f"{API}/projects/{copy}/participants", headers=auth).json()
    assert (copied[0]["practice_answered"], copied[0]["practice_correct"]) == (3, 2)


def test_below_the_pass_mark_the_session_ends_screened_out(app, client, auth, study):
    project_id, slug = study
    rater = _join(client, slug, "p2")
    state = client.get(f"{API}/rate/{slug}/next", headers=rater).json()
    for _ in range(3):
        comparison = state["comparison"]
        assert comparison["practice"]
        wrong = "right" if _side(comparison, "oval") == "left" else "left"
        state = answer(client, slug, rater, comparison["query_id"], choice=wrong).json()
    assert state["failed_practice"] is True
    assert state["comparison"] is None
    assert state["completion_code"] == "PRACTICE-FAIL"
    assert state["completion_url"] == "https://example.org/screened"
    assert state["feedback"] is not None  # the last screen's feedback still comes
    # Nothing is asked or recorded after that.
    assert client.get(f"{API}/rate/{slug}/next", headers=rater).json()["comparison"] is None
    assert _count(app, Assignment, project_id) == 0
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert listed[0]["outcome"] == "failed_practice"
    assert listed[0]["code"] == "PRACTICE-FAIL"
    from fastapi.testclient import TestClient

    from tests.support.workspace import signed_in_browser

    with TestClient(app) as browser:
        signed_in_browser(browser, token=auth["Authorization"].split()[1])
        shown = browser.get(
            f"/projects/{project_id}/participants", params={"outcome": "failed_practice"}
        ).text
    assert "failed the practice" in shown and "Practice right" in shown
    assert '<td class="num" data-label="Practice right">1 / 3</td>' in shown


def test_practice_of_screens_answers_with_picks(app, client, auth, study):
    project_id, slug = study
    configure(
        client,
        auth,
        project_id,
        judgement="odd_one_out",
        practice={"trials": [{"items": ["circle", "oval", "star"], "answer": ["star"]}]},
    )
    rater = _join(client, slug, "p3")
    comparison = client.get(f"{API}/rate/{slug}/next", headers=rater).json()["comparison"]
    assert comparison["format"] == "odd_one_out" and comparison["practice"]
    assert [item["key"] for item in comparison["items"]] == ["circle", "oval", "star"]
    stray = answer(client, slug, rater, comparison["query_id"], choice=None, picks=["moon"])
    assert stray.status_code == 422, stray.text
    done = answer(client, slug, rater, comparison["query_id"], choice=None, picks=["star"])
    assert done.json()["feedback"]["correct"] is True
    assert done.json()["comparison"]["format"] == "odd_one_out"
    assert not done.json()["comparison"]["practice"]


@pytest.mark.parametrize(
    ("practice", "says"),
    [
        (
            {"trials": [{"items": ["circle", "oval", "nowhere"], "answer": ["oval"]}]},
            "practice.trials[0].items: the study has no item 'nowhere'",
        ),
        (
            {"trials": [{"items": ["circle", "oval", "square"], "answer": ["circle"]}]},
            "practice.trials[0]: its answer 'circle' is not one of the items to choose among",
        ),
        (
            {"trials": [{"items": ["circle", "oval", "square", "star"], "answer": ["oval"]}]},
            "practice.trials[0]: a comparison of this study shows 3 items; got 4",
        ),
        (
            {
                "trials": [{"items": ["circle", "oval", "square"], "answer": ["oval"]}],
                "pass_at_least": 2,
            },
            "pass_at_least is 2, but the practice has 1 screens",
        ),
    ],
)
def test_a_bad_practice_is_refused_naming_the_screen(client, auth, study, practice, says):
    project_id, _ = study
    refused = client.patch(
        f"{API}/projects/{project_id}/rating", headers=auth, json={"practice": practice}
    )
    assert refused.status_code in (400, 422), refused.text
    assert says in refused.text
    kept = client.get(f"{API}/projects/{project_id}/rating", headers=auth).json()
    assert kept["practice"] == TRIPLET_PRACTICE


def test_a_format_switch_keeps_the_practice_fitting(client, auth, study):
    """A practice set for triplets is not silently asked as another format: the switch
    comes with a practice of the new format; an arm of another format has its own."""
    project_id, slug = study
    refused = client.patch(
        f"{API}/projects/{project_id}/rating", headers=auth, json={"judgement": "odd_one_out"}
    )
    assert refused.status_code == 400, refused.text
    assert "practice: its screens were set for triplet screens" in refused.text
    misfit = client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"judgement": "rank", "shown": 4, "picks": 1, "practice": TRIPLET_PRACTICE},
    )
    assert misfit.status_code == 400, misfit.text
    assert "practice.trials[0]: a rank screen of this study shows 5 items; got 3" in misfit.text
    odd = {"trials": [{"items": ["circle", "oval", "star"], "answer": ["star"]}]}
    bad_arm = client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={
            "arms": [
                {"name": "A"},
                {
                    "name": "B",
                    "judgement": "odd_one_out",
                    "practice": {
                        "trials": [{"items": ["circle", "oval", "nowhere"], "answer": ["oval"]}]
                    },
                },
            ]
        },
    )
    assert bad_arm.status_code == 400
    assert "arms[B].practice.trials[0].items: the study has no item 'nowhere'" in bad_arm.text
    configure(
        client,
        auth,
        project_id,
        arms=[
            {"name": "A", "target": 1},
            {"name": "B", "target": 1, "judgement": "odd_one_out", "practice": odd},
            {"name": "C", "target": 1, "judgement": "odd_one_out"},
        ],
    )
    seen = {}
    for number in range(3):
        joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": f"a{number}"})
        rater = {"X-Rater-Token": joined.json()["rater_token"]}
        state = client.get(f"{API}/rate/{slug}/next", headers=rater).json()
        seen[joined.json()["arm"]] = (state["step"], state["practice_screens"])
    assert seen == {"A": ("practice", 3), "B": ("practice", 1), "C": ("task", 0)}


def test_the_pages_show_practice_and_its_feedback_without_scripts(client, auth, study):
    """Plain form posts: each practice answer redirects to the page, which shows how it
    went above the next screen."""
    _, slug = study
    started = client.post(f"/r/{slug}/start", data={"participant": "p4"}, follow_redirects=True)
    assert started.status_code == 200
    assert "Practice 1 of 3" in started.text
    query = started.text.split('name="query_id" value="')[1].split('"')[0]
    answered = client.post(
        f"/r/{slug}/answer", data={"query_id": query, "choice": "right"}, follow_redirects=True
    )
    assert answered.status_code == 200
    assert "Not quite: the expected answer was “A oval”." in answered.text
    assert "Practice 2 of 3" in answered.text


def test_the_settings_page_sets_the_practice_a_screen_a_line(app, client, auth, study):
    from fastapi.testclient import TestClient

    from tests.support.workspace import page_csrf, signed_in_browser

    project_id, _ = study
    configure(client, auth, project_id, arms=[{"name": "A", "practice": TRIPLET_PRACTICE}])
    with TestClient(app) as browser:
        signed_in_browser(browser, token=auth["Authorization"].split()[1])
        settings = f"/projects/{project_id}/settings"
        shown = browser.get(settings).text
        assert "circle, oval, square -&gt; oval" in shown  # the saved practice, a line a screen
        lines = "circle, oval, square -> oval\r\nstar, moon, oval → moon\r\n"
        bad = browser.post(
            settings,
            data={
                "csrf_token": page_csrf(browser, settings),
                "practice_screens": lines + "star moon oval\r\n",
                "arm-0-name": "A",
                "arm-0-open": "on",
            },
        )
        assert bad.status_code == 422
        assert "Practice: line 3: write the screen&#39;s item keys, then -&gt;" in bad.text
        saved = browser.post(
            settings,
            data={
                "csrf_token": page_csrf(browser, settings),
                "practice_screens": lines,
                "practice_pass_at_least": "1",
                "arm-0-name": "A",
                "arm-0-open": "on",
            },
        )
        assert saved.status_code == 200 and "Saved" in saved.text, saved.text[-2000:]
    rating = client.get(f"{API}/projects/{project_id}/rating", headers=auth).json()
    assert rating["practice"] == {
        "trials": [
            {"items": ["circle", "oval", "square"], "answer": ["oval"]},
            {"items": ["star", "moon", "oval"], "answer": ["moon"]},
        ],
        "pass_at_least": 1,
    }
    # The arm's own practice, set through the API, is kept by the page's rows.
    assert rating["arms"][0]["practice"] == TRIPLET_PRACTICE
