"""The study link opens, pauses and closes. A new study's link is closed: nobody joins,
nothing is asked and no completion code is handed out (a recruiting platform would pay
for it), however empty the study; it opens only once there is something to ask. While
paused, the answer to the comparison on a rater's screen still counts, and nothing new
is asked; a rater who finished their session keeps their code."""

from __future__ import annotations

from sqlalchemy import func, select

from app.models import Rater
from tests.support.links import API


def _put_link(client, auth, project_id, state):
    return client.put(f"{API}/projects/{project_id}/link", headers=auth, json={"state": state})


def _raters(app) -> int:
    with app.state.session_factory() as session:
        return session.scalar(select(func.count()).select_from(Rater))


def test_an_empty_studys_link_is_closed_and_pays_no_code(app, client, auth, project):
    rating = client.get(f"{API}/projects/{project['id']}/rating", headers=auth).json()
    assert rating["link_state"] == "closed" and rating["link_opened_at"] is None
    slug = rating["public_slug"]

    page = client.get(f"/r/{slug}?PROLIFIC_PID=p1")
    assert page.status_code == 200
    assert "This study has not opened yet" in page.text
    assert "completion code" not in page.text.lower() and 'name="csrf' not in page.text
    assert "/start" not in page.text  # no Start button
    joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": "p1"})
    assert joined.status_code == 409
    assert joined.json()["detail"] == "This study has not opened yet. Please come back later."
    started = client.post(f"/r/{slug}/start", data={"PROLIFIC_PID": "p1"}, follow_redirects=False)
    assert started.status_code == 409 and "not opened yet" in started.text
    assert "set-cookie" not in started.headers
    assert _raters(app) == 0  # a bot at the link creates nothing

    refused = _put_link(client, auth, project["id"], "open")
    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert "has 0 items, and a triplet screen shows 3; upload items first" in detail
    unknown = _put_link(client, auth, project["id"], "ajar")
    assert unknown.status_code == 422 and "state" in unknown.text
    assert (
        client.get(f"{API}/projects/{project['id']}/rating", headers=auth).json()["link_state"]
        == "closed"
    )


def test_a_paused_link_keeps_the_answer_on_screen_asks_nothing_new_and_resumes(
    app, client, auth, project
):
    pid = project["id"]
    items = "key\n" + "\n".join(f"i{n}" for n in range(8))
    assert (
        client.post(
            f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", items)}
        ).status_code
        == 201
    )
    client.patch(
        f"{API}/projects/{pid}/rating",
        headers=auth,
        json={"answers_per_rater": 3, "attention_rate": 0, "completion_code": "PAID-3"},
    )
    opened = _put_link(client, auth, pid, "open")
    assert opened.status_code == 200 and opened.json()["link_state"] == "open"
    slug, first_opened = opened.json()["public_slug"], opened.json()["link_opened_at"]
    joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": "p1"})
    token = {"X-Rater-Token": joined.json()["rater_token"]}
    shown = client.get(f"{API}/rate/{slug}/next", headers=token).json()["comparison"]
    body = {"query_id": shown["query_id"], "choice": "left"}
    shown = client.post(f"{API}/rate/{slug}/answers", headers=token, json=body).json()["comparison"]

    assert _put_link(client, auth, pid, "paused").json()["link_state"] == "paused"
    body = {"query_id": shown["query_id"], "choice": "right"}
    answered = client.post(f"{API}/rate/{slug}/answers", headers=token, json=body).json()
    assert answered["answered"] == 2  # the comparison on screen counts
    assert answered["comparison"] is None and answered["link"] == "paused"
    assert answered["completion_code"] is None and not answered["complete"]
    waiting = client.get(f"{API}/rate/{slug}/next", headers=token).json()
    assert waiting["comparison"] is None and waiting["completion_code"] is None
    assert client.post(f"{API}/rate/{slug}/raters", json={}).status_code == 409
    triplets = client.get(f"{API}/projects/{pid}", headers=auth).json()["triplet_count"]
    assert triplets == 2

    resumed = _put_link(client, auth, pid, "open").json()
    assert resumed["link_opened_at"] == first_opened  # when it first opened
    shown = client.get(f"{API}/rate/{slug}/next", headers=token).json()["comparison"]
    assert shown is not None
    body = {"query_id": shown["query_id"], "choice": "left"}
    done = client.post(f"{API}/rate/{slug}/answers", headers=token, json=body).json()
    assert done["complete"] and done["completion_code"] == "PAID-3"

    # Closed for good: a finished rater keeps their code; newcomers read that it ended.
    assert _put_link(client, auth, pid, "closed").json()["link_state"] == "closed"
    assert (
        client.get(f"{API}/rate/{slug}/next", headers=token).json()["completion_code"] == "PAID-3"
    )
    ended = client.get(f"/r/{slug}")
    assert "This study has closed and takes no more answers" in ended.text


def test_the_rating_page_of_a_paused_study_says_so_without_a_code(app, client, auth, project):
    pid = project["id"]
    items = "key\n" + "\n".join(f"i{n}" for n in range(5))
    client.post(f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", items)})
    slug = _put_link(client, auth, pid, "open").json()["public_slug"]
    started = client.post(f"/r/{slug}/start", data={"participant": "p1"}, follow_redirects=True)
    assert started.status_code == 200 and 'class="candidate"' in started.text
    _put_link(client, auth, pid, "paused")
    paused = client.get(f"/r/{slug}/rate")
    assert "This study is paused for now" in paused.text
    assert 'class="candidate"' not in paused.text and "completion code" not in paused.text.lower()
