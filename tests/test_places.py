"""What decides who gets paid, on both databases: a study's quota (the places a recruiting
platform sold, never given twice), speeders excluded by their median time per answer,
and the participants list a researcher approves payments from (outcome, code,
exclusion and its reason; a page at a time, of one outcome)."""

from __future__ import annotations

import csv
import io
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.core.db import unit_of_work
from app.models import Project, Rater
from app.models._types import utcnow
from app.raters import places, quality
from tests.support.rating import answer, configure, join

API = "/api/v1"


@pytest.fixture
def study(client, auth, project):
    """Four items, an open link, sessions of two answers, no attention checks (their
    answers would not be timed triplets)."""
    rows = "key,features\ncircle,0 0\noval,0.2 0.1\nsquare,3 3\ntriangle,3.5 2.5"
    uploaded = client.post(
        f"{API}/projects/{project['id']}/items", headers=auth, files={"file": ("i.csv", rows)}
    )
    assert uploaded.status_code == 201, uploaded.text
    configure(client, auth, project["id"], answers_per_rater=2, attention_rate=0)
    opened = client.put(
        f"{API}/projects/{project['id']}/link", headers=auth, json={"state": "open"}
    )
    assert opened.status_code == 200, opened.text
    return project["id"], opened.json()["public_slug"]


def _finish(client, slug, rater, state, times=(900, 900)) -> dict:
    for elapsed in times:
        state = answer(
            client, slug, rater, state["comparison"]["query_id"], response_time_ms=elapsed
        ).json()
    return state


def _seen(app, external_id: str, ago: timedelta) -> None:
    with unit_of_work(app.state.session_factory) as session:
        rater = session.scalar(select(Rater).where(Rater.external_id == external_id))
        rater.last_seen_at = utcnow() - ago


def test_a_full_study_takes_nobody_new_and_a_quiet_session_gives_its_place_back(
    app, client, auth, study
):
    project_id, slug = study
    configure(client, auth, project_id, quota=2, lease_seconds=60)
    done, state = join(client, slug, PROLIFIC_PID="p-done")
    assert _finish(client, slug, done, state)["completion_code"] is not None
    join(client, slug, PROLIFIC_PID="p-live")  # answering: holds the second place

    refused = client.post(f"{API}/rate/{slug}/raters", json={"PROLIFIC_PID": "p-late"})
    assert refused.status_code == 409
    assert "This study is full" in refused.json()["detail"]
    landing = client.get(f"/r/{slug}?PROLIFIC_PID=p-late")
    assert landing.status_code == 200 and "This study is full" in landing.text
    assert 'action="/r/' not in landing.text  # no Start button to press
    started = client.post(f"/r/{slug}/start", data={"PROLIFIC_PID": "p-late"})
    assert started.status_code == 409 and "This study is full" in started.text
    # Whoever holds a place comes back to it.
    again = client.post(f"{API}/rate/{slug}/raters", json={"PROLIFIC_PID": "p-live"})
    assert again.status_code == 201, again.text
    page = client.get(f"/projects/{project_id}/participants", headers=auth).text
    assert "<dt>Places taken</dt><dd>2 of 2</dd>" in page and "The study is full" in page

    # Quiet for longer than a lease: abandoned, and the place is free again.
    _seen(app, "p-live", timedelta(seconds=61))
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert {p["participant"]: p["outcome"] for p in listed} == {
        "p-done": "completed",
        "p-live": "abandoned",
    }
    late, _ = join(client, slug, PROLIFIC_PID="p-late")
    assert client.post(f"{API}/rate/{slug}/raters", json={}).status_code == 409
    # Raising the quota opens places at once.
    configure(client, auth, project_id, quota=3)
    assert client.post(f"{API}/rate/{slug}/raters", json={}).status_code == 201
    configure(client, auth, project_id, quota=None)
    assert client.post(f"{API}/rate/{slug}/raters", json={}).status_code == 201


def test_joins_racing_for_the_last_places_get_each_place_once(app, client, auth, study):
    project_id, slug = study
    configure(client, auth, project_id, quota=4)
    statuses: list[int] = []
    barrier = threading.Barrier(12)

    def arrive(number: int) -> None:
        barrier.wait()
        response = client.post(f"{API}/rate/{slug}/raters", json={"participant": f"r{number}"})
        statuses.append(response.status_code)

    threads = [threading.Thread(target=arrive, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [201] * 4 + [409] * 8
    with app.state.session_factory() as session:
        project = session.get(Project, project_id)
        assert places.taken(session=session, project=project) == 4


def test_live_and_abandoned_are_the_same_rule_in_the_count_and_the_list(app, client, auth, study):
    """The count a join takes (SQL) and the participants' outcomes (Python) agree on
    every kind of session, either side of the lease."""
    project_id, slug = study
    configure(client, auth, project_id, lease_seconds=30)
    now = utcnow()
    kinds = {
        "fresh": {"last_seen_at": now},
        "just-inside": {"last_seen_at": now - timedelta(seconds=29)},
        "just-outside": {"last_seen_at": now - timedelta(seconds=31)},
        # Never seen (a rater named in uploaded answers, who never joined): no place.
        "never-seen-new": {"last_seen_at": None, "created_at": now - timedelta(seconds=5)},
        "never-seen-old": {"last_seen_at": None, "created_at": now - timedelta(minutes=5)},
        "completed-long-ago": {"completed_at": now, "last_seen_at": now - timedelta(days=1)},
        "out-of-work": {"out_of_work_at": now, "last_seen_at": now - timedelta(days=1)},
        "screened-out": {"screened_out_at": now},
        "declined-consent": {"consent_declined_at": now},
        "timed-out": {"timed_out_at": now},
    }
    with unit_of_work(app.state.session_factory) as session:
        for name, values in kinds.items():
            session.add(Rater(project_id=project_id, external_id=name, **values))
    with app.state.session_factory() as session:
        project = session.get(Project, project_id)
        raters = session.scalars(select(Rater).where(Rater.project_id == project_id)).all()
        by_python = {
            rater.external_id
            for rater in raters
            if places.is_live(project, rater, now) or rater.completed_at or rater.out_of_work_at
        }
        assert by_python == {
            "fresh",
            "just-inside",
            "completed-long-ago",
            "out-of-work",
        }
        assert places.taken(session=session, project=project, now=now) == len(by_python)


def test_speeders_are_excluded_by_their_median_time_per_answer(app, client, auth, study):
    project_id, slug = study
    configure(client, auth, project_id, answers_per_rater=4)
    fast, state = join(client, slug, PROLIFIC_PID="p-bot")
    _finish(client, slug, fast, state, times=(40, 60, 2000, 50))
    slow, state = join(client, slug, PROLIFIC_PID="p-human")
    _finish(client, slug, slow, state, times=(700, 1500, 900, 1100))
    # A threshold set after the answers came: the workers measure again by themselves.
    with unit_of_work(app.state.session_factory) as session:
        project = session.get(Project, project_id)
        quality.refresh(session=session, project=project)
        assert quality.projects_with_new_answers(session) == []
    configure(client, auth, project_id, min_median_response_ms=300, quality_min_answers=4)
    with unit_of_work(app.state.session_factory) as session:
        assert quality.projects_with_new_answers(session) == [project_id]
        quality.refresh(session=session, project=session.get(Project, project_id))

    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    by_id = {p["participant"]: p for p in listed}
    assert by_id["p-bot"]["excluded"] is True
    assert by_id["p-bot"]["exclusion_reason"] == (
        "answered in a median 55 ms over 4 answers (below 300 ms)"
    )
    assert by_id["p-human"]["excluded"] is False and by_id["p-human"]["exclusion_reason"] == ""
    rater = client.get(f"{API}/projects/{project_id}/raters", headers=auth).json()
    assert {r["external_id"]: r["excluded"] for r in rater} == {"p-bot": True, "p-human": False}

    # Too few answers timed: the threshold waits for them.
    configure(client, auth, project_id, quality_min_answers=5)
    with unit_of_work(app.state.session_factory) as session:
        quality.refresh(session=session, project=session.get(Project, project_id))
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert not any(p["excluded"] for p in listed)


def test_the_participants_list_gives_exclusions_and_pages_by_outcome(app, client, auth, study):
    project_id, slug = study
    for number in range(3):
        rater, state = join(client, slug, PROLIFIC_PID=f"p-done-{number}")
        _finish(client, slug, rater, state)
    join(client, slug, PROLIFIC_PID="=cmd|' /C calc'!A0")
    excluded = client.get(f"{API}/projects/{project_id}/raters", headers=auth).json()[1]
    decided = client.patch(
        f"{API}/projects/{project_id}/raters/{excluded['id']}",
        headers=auth,
        json={"excluded": True},
    )
    assert decided.status_code == 200, decided.text

    everyone = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert [p["participant"] for p in everyone] == [p["participant_id"] for p in everyone]
    assert [(p["outcome"], p["excluded"]) for p in everyone] == [
        ("completed", False),
        ("completed", True),
        ("completed", False),
        ("in_progress", False),
    ]
    assert everyone[1]["exclusion_reason"] == "set by the researcher"
    assert everyone[0]["code"] == everyone[0]["completion_code"] is not None
    completed = client.get(
        f"{API}/projects/{project_id}/participants",
        headers=auth,
        params={"outcome": "completed", "offset": 1, "limit": 1},
    ).json()
    assert [p["participant"] for p in completed] == ["p-done-1"]
    wrong = client.get(
        f"{API}/projects/{project_id}/participants", headers=auth, params={"outcome": "paid"}
    )
    assert wrong.status_code == 422 and "outcome" in wrong.text

    exported = client.get(f"{API}/projects/{project_id}/participants/export", headers=auth)
    rows = list(csv.DictReader(io.StringIO(exported.content.decode("utf-8-sig"))))
    assert [
        (r["participant"], r["outcome"], r["code"] != "", r["excluded"], r["exclusion_reason"])
        for r in rows
    ] == [
        ("p-done-0", "completed", True, "false", ""),
        ("p-done-1", "completed", True, "true", "set by the researcher"),
        ("p-done-2", "completed", True, "false", ""),
        ("'=cmd|' /C calc'!A0", "in_progress", False, "false", ""),
    ]

    page = client.get(
        f"/projects/{project_id}/participants", headers=auth, params={"outcome": "in_progress"}
    ).text
    assert "p-done-0" not in page and "=cmd|" in page
    assert '<option value="in_progress" selected>' in page
