"""The participant's path around the task, through the rater API and the rating pages, on
both databases: the consent first (nothing asked or recorded before it; declining ends
the session with its own code), the debrief with the code at the end, and `step` in
every rater state."""

from __future__ import annotations

import csv
import io

import pytest
from sqlalchemy import func, select

from app.models import Assignment, Rater, Triplet
from tests.support.rating import answer, configure

API = "/api/v1"
CONSENT = {
    "text": "# About this study\n\nYou compare shapes. <script>alert(1)</script> "
    "[Our policy](javascript:alert(2)) and [the lab](https://lab.example/).",
    "statements": ["I have read the information above.", "I agree to take part."],
}


@pytest.fixture
def study(client, auth, project):
    rows = "key,features\ncircle,0 0\noval,0.2 0.1\nsquare,3 3\ntriangle,3.5 2.5"
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
        consent=CONSENT,
        no_consent_code="RETURNED",
        no_consent_url="https://example.org/returned",
        debrief="Thank you! **The study** was about how people see shapes.",
    )
    opened = client.put(
        f"{API}/projects/{project['id']}/link", headers=auth, json={"state": "open"}
    )
    assert opened.status_code == 200, opened.text
    return project["id"], opened.json()["public_slug"]


def _join(client, slug, participant: str) -> tuple[dict, dict]:
    joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": participant})
    assert joined.status_code == 201, joined.text
    return {"X-Rater-Token": joined.json()["rater_token"]}, joined.json()


def _count(app, model, project_id) -> int:
    with app.state.session_factory() as session:
        return session.scalar(
            select(func.count()).select_from(model).where(model.project_id == project_id)
        )


def test_nothing_is_asked_before_consent_and_the_debrief_comes_with_the_code(
    app, client, auth, study
):
    project_id, slug = study
    token, joined = _join(client, slug, "p-yes")
    assert joined["step"] == "consent" and joined["comparison"] is None
    assert joined["consent"] == {**CONSENT, "version": 1}
    waiting = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    assert waiting["step"] == "consent" and waiting["comparison"] is None
    early = answer(client, slug, token, 1)  # nothing was served: where they stand, unrecorded
    assert early.status_code == 200 and early.json()["step"] == "consent"
    assert _count(app, Assignment, project_id) == 0 and _count(app, Triplet, project_id) == 0

    agreed = client.post(f"{API}/rate/{slug}/consent", headers=token, json={"agree": True})
    assert agreed.status_code == 200, agreed.text
    assert agreed.json()["step"] == "task" and agreed.json()["consent"] is None
    again = client.post(f"{API}/rate/{slug}/consent", headers=token, json={"agree": True})
    assert again.status_code == 200  # sent twice, recorded once
    changed_mind = client.post(f"{API}/rate/{slug}/consent", headers=token, json={"agree": False})
    assert changed_mind.status_code == 409 and "already given" in changed_mind.json()["detail"]

    state = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    assert state["step"] == "task" and state["comparison"] is not None
    for _ in range(2):
        state = answer(client, slug, token, state["comparison"]["query_id"]).json()
    assert state["step"] == "debrief" and state["completion_code"] == "DONE-2"
    assert state["debrief"] == "Thank you! **The study** was about how people see shapes."

    # A new version of the consent: who agreed before keeps the version they agreed to.
    configure(client, auth, project_id, consent={**CONSENT, "statements": ["I agree."]})
    later, joined = _join(client, slug, "p-later")
    assert joined["consent"]["version"] == 2
    client.post(f"{API}/rate/{slug}/consent", headers=later, json={"agree": True})
    with app.state.session_factory() as session:
        versions = dict(session.execute(select(Rater.external_id, Rater.consent_version)).all())
    assert versions == {"p-yes": 1, "p-later": 2}


def test_declining_ends_the_session_with_its_own_code_never_the_completion_code(
    app, client, auth, study
):
    project_id, slug = study
    configure(client, auth, project_id, consent={**CONSENT, "text": "Version two."})
    token, _ = _join(client, slug, "p-no")
    declined = client.post(f"{API}/rate/{slug}/consent", headers=token, json={"agree": False})
    assert declined.status_code == 200, declined.text
    body = declined.json()
    assert (body["step"], body["declined"], body["comparison"]) == ("done", True, None)
    assert body["completion_code"] == "RETURNED"
    assert body["completion_url"] == "https://example.org/returned"
    later = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    assert later["completion_code"] == "RETURNED" and later["comparison"] is None
    assert later["debrief"] is None  # the debrief is for those who took part
    agree_now = client.post(f"{API}/rate/{slug}/consent", headers=token, json={"agree": True})
    assert agree_now.status_code == 409 and "declined" in agree_now.json()["detail"]
    assert _count(app, Assignment, project_id) == 0

    yes, _ = _join(client, slug, "p-yes")
    client.post(f"{API}/rate/{slug}/consent", headers=yes, json={"agree": True})
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    by_id = {p["participant"]: p for p in listed}
    assert by_id["p-no"]["outcome"] == "declined_consent"
    assert by_id["p-no"]["code"] == "RETURNED" and by_id["p-no"]["consented_at"] is None
    assert by_id["p-yes"]["consent_version"] == 2 and by_id["p-yes"]["consented_at"]
    exported = client.get(f"{API}/projects/{project_id}/participants/export", headers=auth)
    rows = list(csv.DictReader(io.StringIO(exported.content.decode("utf-8-sig"))))
    assert [(r["participant"], r["consent_version"], bool(r["consented_at"])) for r in rows] == [
        ("p-no", "", False),
        ("p-yes", "2", True),
    ]
    # The archive carries the consent and each participant's answer to it.
    archive = client.get(f"{API}/projects/{project_id}/archive", headers=auth).content
    copy = client.post(
        f"{API}/project-archives", headers=auth, files={"file": ("study.zip", archive)}
    ).json()["id"]
    moved = client.get(f"{API}/projects/{copy}/participants", headers=auth).json()
    keep = ("participant", "outcome", "code", "consented_at", "consent_version")
    assert [{k: p[k] for k in keep} for p in moved] == [{k: p[k] for k in keep} for p in listed]
    rating = client.get(f"{API}/projects/{copy}/rating", headers=auth).json()
    assert rating["consent"]["text"] == "Version two." and rating["no_consent_code"] == "RETURNED"
    client.put(f"{API}/projects/{copy}/link", headers=auth, json={"state": "open"})
    joined = client.post(f"{API}/rate/{rating['public_slug']}/raters", json={}).json()
    assert joined["step"] == "consent" and joined["consent"]["version"] == 2


def test_a_study_without_consent_asks_none(client, auth, study):
    project_id, slug = study
    configure(client, auth, project_id, consent=None, instructions="Look closely.")
    token, joined = _join(client, slug, "p-plain")
    assert joined["step"] == "instructions" and joined["consent"] is None
    refused = client.post(f"{API}/rate/{slug}/consent", headers=token, json={"agree": True})
    assert refused.status_code == 409 and "asks no consent" in refused.json()["detail"]
    assert client.get(f"{API}/rate/{slug}/next", headers=token).json()["step"] == "task"


@pytest.mark.parametrize(
    ("consent", "where"),
    [
        ({"text": "", "statements": ["I agree."]}, ["consent", "text"]),
        ({"text": "Info", "statements": []}, ["consent", "statements"]),
        ({"text": "Info", "statements": ["x" * 501]}, ["consent", "statements", 0]),
        ({"text": "Info", "statements": ["I agree."], "extra": 1}, ["consent", "extra"]),
        ("I agree", ["consent"]),
    ],
)
def test_a_bad_consent_is_refused_naming_the_field(client, auth, study, consent, where):
    project_id, _ = study
    refused = client.patch(
        f"{API}/projects/{project_id}/rating", headers=auth, json={"consent": consent}
    )
    assert refused.status_code == 422
    [problem] = refused.json()["detail"]
    assert problem["loc"][: len(where) + 1] == ["body", *where], problem


def test_the_pages_ask_consent_first_and_show_the_lab_text_safely(client, auth, study):
    project_id, slug = study
    started = client.post(f"/r/{slug}/start", data={"participant": "p-page"})
    assert started.status_code == 200
    page = started.text
    assert "<h1>About this study</h1>" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
    assert 'href="javascript:' not in page and 'href="https://lab.example/"' in page
    assert "I have read the information above." in page
    # "I agree" without every statement ticked: said so, and nothing recorded.
    unticked = client.post(f"/r/{slug}/consent", data={"answer": "agree", "statement-0": "on"})
    assert unticked.status_code == 422 and "Tick each statement" in unticked.text
    agreed = client.post(
        f"/r/{slug}/consent",
        data={"answer": "agree", "statement-0": "on", "statement-1": "on"},
    )
    assert agreed.status_code == 200 and 'name="query_id"' in agreed.text
    settings = client.get(f"/projects/{project_id}/settings", headers=auth).text
    assert "I agree to take part." in settings and 'name="consent_text"' in settings


QUESTIONS = [
    {"name": "age", "kind": "number", "prompt": "Your age?", "required": True},
    {
        "name": "hand",
        "kind": "choice",
        "prompt": "Which hand do you write with?",
        "options": ["left", "right", "both"],
    },
    {
        "name": "sight",
        "kind": "choices",
        "prompt": "Do you wear…",
        "options": ["glasses", "contact lenses"],
        "required": False,
    },
    {
        "name": "effort",
        "kind": "likert",
        "prompt": "How hard was it?",
        "options": ["1", "2", "3", "4", "5"],
    },
    {"name": "notes", "kind": "text", "prompt": "Anything else?", "required": False},
]


def _send(client, slug, token, answers):
    return client.post(f"{API}/rate/{slug}/questionnaire", headers=token, json={"answers": answers})


def test_a_questionnaire_after_the_task_comes_before_the_code_and_is_exported(
    app, client, auth, study
):
    project_id, slug = study
    configure(
        client,
        auth,
        project_id,
        consent=None,
        debrief="",
        questionnaire={"when": "after", "questions": QUESTIONS},
    )
    token, joined = _join(client, slug, "p-q")
    assert joined["step"] == "task"
    early = _send(client, slug, token, {"age": 30})
    assert early.status_code == 409 and "step is task" in early.json()["detail"]
    state = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    for _ in range(2):
        state = answer(client, slug, token, state["comparison"]["query_id"]).json()
    assert state["step"] == "questionnaire" and state["completion_code"] is None
    assert [q["name"] for q in state["questionnaire"]["questions"]] == [
        q["name"] for q in QUESTIONS
    ]
    # Each problem names its question; nothing is stored.
    refused = _send(
        client,
        slug,
        token,
        {"age": "thirty", "hand": "middle", "sight": ["glasses", "glasses"], "shoe": 42},
    )
    assert refused.status_code == 422
    detail = refused.json()["detail"]
    for words in (
        "age: must be a number",
        "hand: must be one of: left, right, both",
        "sight: an option is chosen twice",
        "effort: an answer is required",
        "shoe: not a question of this questionnaire",
    ):
        assert words in detail, detail
    sent = {"age": 31, "hand": "right", "sight": ["glasses"], "effort": "4", "notes": "=1+1"}
    done = _send(client, slug, token, sent)
    assert done.status_code == 200, done.text
    assert done.json()["step"] == "done" and done.json()["completion_code"] == "DONE-2"
    assert _send(client, slug, token, sent).status_code == 200  # sent twice: stored once
    assert _send(client, slug, token, {**sent, "age": 32}).status_code == 409

    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert listed[0]["questionnaire"] == sent
    exported = client.get(f"{API}/projects/{project_id}/participants/export", headers=auth)
    [row] = csv.DictReader(io.StringIO(exported.content.decode("utf-8-sig")))
    assert (row["q_age"], row["q_hand"], row["q_sight"], row["q_effort"], row["q_notes"]) == (
        "31",
        "right",
        "glasses",
        "4",
        "'=1+1",
    )


def test_a_questionnaire_before_the_task_comes_after_the_consent(app, client, auth, study):
    project_id, slug = study
    configure(
        client,
        auth,
        project_id,
        questionnaire={"when": "before", "questions": QUESTIONS[:2]},
    )
    token, joined = _join(client, slug, "p-before")
    assert joined["step"] == "consent"
    agreed = client.post(f"{API}/rate/{slug}/consent", headers=token, json={"agree": True})
    assert agreed.json()["step"] == "questionnaire"
    waiting = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    assert waiting["step"] == "questionnaire" and waiting["comparison"] is None
    assert _count(app, Assignment, project_id) == 0
    answered = _send(client, slug, token, {"age": 40.5, "hand": "left"})
    assert answered.status_code == 200, answered.text
    state = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    assert state["step"] == "task" and state["comparison"] is not None


@pytest.mark.parametrize(
    ("questionnaire", "words"),
    [
        ({"when": "during", "questions": QUESTIONS}, "when"),
        ({"when": "after", "questions": []}, "questions"),
        ({"when": "after", "questions": [{**QUESTIONS[1], "options": ["only"]}]}, "needs 2"),
        ({"when": "after", "questions": [{**QUESTIONS[0], "options": ["x", "y"]}]}, "no options"),
        ({"when": "after", "questions": [QUESTIONS[0], QUESTIONS[0]]}, "same name"),
        ({"when": "after", "questions": [{**QUESTIONS[0], "name": "1st"}]}, "name"),
        ({"when": "after", "questions": [{**QUESTIONS[0], "kind": "slider"}]}, "kind"),
    ],
)
def test_a_bad_questionnaire_is_refused_saying_what_is_wrong(
    client, auth, study, questionnaire, words
):
    project_id, _ = study
    refused = client.patch(
        f"{API}/projects/{project_id}/rating", headers=auth, json={"questionnaire": questionnaire}
    )
    assert refused.status_code == 422 and words in refused.text, refused.text


def test_a_session_in_blocks_has_a_break_between_them(app, client, auth, study):
    project_id, slug = study
    refused = client.patch(f"{API}/projects/{project_id}/rating", headers=auth, json={"blocks": 3})
    assert refused.status_code == 400 and "3 blocks need at least 3 answers" in refused.text
    configure(
        client,
        auth,
        project_id,
        consent=None,
        debrief="",
        answers_per_rater=5,
        blocks=2,
        break_seconds=20,
    )
    token, _ = _join(client, slug, "p-blocks")
    state = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    seen = [(state["step"], state["block"], state["blocks"], state["break_seconds"])]
    for _ in range(4):
        state = answer(client, slug, token, state["comparison"]["query_id"]).json()
        seen.append((state["step"], state["block"], state["blocks"], state["break_seconds"]))
    # Blocks of 3 and 2 answers: the break comes with the 4th comparison, once.
    assert seen == [
        ("task", 1, 2, 0),
        ("task", 1, 2, 0),
        ("task", 1, 2, 0),
        ("break", 2, 2, 20),
        ("task", 2, 2, 0),
    ]
    again = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    assert again["step"] == "task"  # the same comparison, still after the break
    last = answer(client, slug, token, state["comparison"]["query_id"]).json()
    assert last["step"] == "done" and last["completion_code"] == "DONE-2"


def test_a_format_switch_on_a_study_with_answers_is_confirmed_after_a_preview(
    app, client, auth, study
):
    """The settings page warns before a study with answers changes what its screens
    ask, offers a preview of the new screen, and switches once the box is ticked; the
    API, whose callers know what they send, switches at once."""
    from fastapi.testclient import TestClient

    from tests.support.workspace import page_csrf, signed_in_browser

    project_id, slug = study
    configure(client, auth, project_id, consent=None, questionnaire=None)
    token, _ = _join(client, slug, "p-first")
    first = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    answer(client, slug, token, first["comparison"]["query_id"])

    preview = client.get(f"/projects/{project_id}/preview?judgement=odd_one_out", headers=auth).text
    assert "in the “odd one out” format, before the study is switched to it" in preview
    assert "Which one is least like the other two?" in preview
    assert 'name="judgement" value="odd_one_out"' in preview  # another draw keeps it
    bad = client.get(f"/projects/{project_id}/preview?judgement=tournament", headers=auth)
    assert bad.status_code in (400, 422) and "tournament" in bad.text

    with TestClient(app) as browser:
        signed_in_browser(browser, token=auth["Authorization"].split()[1])
        settings = f"/projects/{project_id}/settings"
        assert f"/projects/{project_id}/preview?judgement=rank" in browser.get(settings).text
        fields = {"csrf_token": page_csrf(browser, settings), "judgement": "odd_one_out"}
        warned = browser.post(settings, data=fields)
        assert warned.status_code == 409
        assert "This study has 1 answers from triplet screens" in warned.text
        assert 'name="confirm_format_switch"' in warned.text
        rating = client.get(f"{API}/projects/{project_id}/rating", headers=auth).json()
        assert rating["judgement"] == "triplet"  # nothing switched yet
        fields["csrf_token"] = page_csrf(browser, settings)
        saved = browser.post(settings, data={**fields, "confirm_format_switch": "yes"})
        assert saved.status_code == 200 and "Saved" in saved.text
    rating = client.get(f"{API}/projects/{project_id}/rating", headers=auth).json()
    assert rating["judgement"] == "odd_one_out"
    assert rating["question"] == "Which one is least like the other two?"
    configure(client, auth, project_id, judgement="triplet")  # the API switches at once


def test_a_session_that_runs_out_of_time_ends_with_the_timeout_code(app, client, auth, study):
    """Past max_session_minutes nothing more is asked or recorded, the timeout code is
    shown, and the participants list says so; a session that completed in time keeps
    its completion code."""
    from datetime import timedelta

    from app.models._types import utcnow

    project_id, slug = study
    configure(
        client,
        auth,
        project_id,
        consent=None,
        debrief="",
        max_session_minutes=30,
        timeout_code="TIMED-OUT",
        timeout_url="https://example.org/t",
    )
    slow, _ = _join(client, slug, "p-slow")
    state = client.get(f"{API}/rate/{slug}/next", headers=slow).json()
    assert state["step"] == "task" and state["comparison"] is not None
    done, _ = _join(client, slug, "p-quick")
    quick = client.get(f"{API}/rate/{slug}/next", headers=done).json()
    for _ in range(2):
        quick_last = quick["comparison"]["query_id"]
        quick = answer(client, slug, done, quick_last).json()
    assert quick["completion_code"] == "DONE-2"
    with app.state.session_factory() as session, session.begin():
        for rater in session.scalars(select(Rater)):
            rater.created_at = utcnow() - timedelta(minutes=31)
    late = answer(client, slug, slow, state["comparison"]["query_id"])
    assert late.status_code == 200
    body = late.json()
    assert (body["step"], body["timed_out"], body["comparison"]) == ("done", True, None)
    assert (body["completion_code"], body["completion_url"]) == (
        "TIMED-OUT",
        "https://example.org/t",
    )
    assert _count(app, Triplet, project_id) == 2  # the late answer was not recorded
    again = client.get(f"{API}/rate/{slug}/next", headers=done).json()
    assert again["completion_code"] == "DONE-2" and not again["timed_out"]
    sent_again = answer(client, slug, done, quick_last).json()  # a retry, after the limit
    assert sent_again["completion_code"] == "DONE-2" and not sent_again["timed_out"]
    with app.state.session_factory() as session:
        ended = dict(session.execute(select(Rater.external_id, Rater.timed_out_at)).all())
    assert ended["p-quick"] is None and ended["p-slow"] is not None
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert {p["participant"]: (p["outcome"], p["code"]) for p in listed} == {
        "p-slow": ("timed_out", "TIMED-OUT"),
        "p-quick": ("completed", "DONE-2"),
    }
    page = client.post(f"/r/{slug}/start", data={"participant": "p-slow"})
    assert "Your time is up" in page.text and "TIMED-OUT" in page.text
