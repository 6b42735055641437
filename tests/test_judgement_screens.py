"""Studies of screens through the rater API, on both databases: an odd-one-out of three
and "pick k of n" rank screens are served in the study's format, answered with picks,
stored as one judgement with the triplets it implies, checked like triplets when they
are attention checks, and refused with a 422 that says what to send when the answer's
shape is wrong; a retried answer counts once."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sqlalchemy import select

from app.learn.judgements import rank_triplet_count
from app.models import Assignment, Item, Judgement, Purpose, Rater, Triplet
from tests.support.links import open_link
from tests.support.screens import answer_screen, join_rater, next_screen, rows_of, set_rating
from tests.support.workspace import signed_in_page_csrf

API = "/api/v1"


def _items(client, auth, project_id: int, count: int) -> list[str]:
    rows = "key,text\n" + "".join(f"w{n},word {n}\n" for n in range(count))
    uploaded = client.post(
        f"{API}/projects/{project_id}/items", headers=auth, files={"file": ("w.csv", rows)}
    )
    assert uploaded.status_code == 201, uploaded.text
    return [f"w{n}" for n in range(count)]


def test_a_rank_study_serves_k_of_n_screens_and_stores_each_as_one_judgement(
    client, auth, project, app
):
    pid = project["id"]
    keys = _items(client, auth, pid, 5)
    refused = set_rating(client, auth, pid, judgement="rank", shown=4, picks=4)
    assert refused.status_code == 400
    assert "picks must be fewer than shown" in refused.json()["detail"]
    settings = set_rating(client, auth, pid, judgement="rank", shown=4, picks=2, attention_rate=0)
    assert settings.status_code == 200, settings.text
    assert settings.json()["question"].startswith("Pick the ones most like")
    slug = open_link(client, auth, pid)["public_slug"]
    # Open with 5 items: a screen of 5 is the most these settings may show.
    too_many = set_rating(client, auth, pid, shown=6)
    assert too_many.status_code == 409
    assert "open with 5 items" in too_many.json()["detail"]

    token = join_rater(client, slug)
    screen = next_screen(client, slug, token)
    assert screen["format"] == "rank" and screen["picks"] == 2
    assert screen["anchor"] is None and screen["left"] is None
    shown = [item["key"] for item in screen["items"]]
    reference = screen["reference"]["key"]
    assert len(shown) == 4 and len({*shown, reference}) == 5 and set(shown) <= set(keys)
    assert screen["items"][0]["text"].startswith("word")
    assert next_screen(client, slug, token) == screen  # held until answered

    query = screen["query_id"]
    wrong = {
        "choice": ({"choice": "left"}, "this query is a rank screen"),
        "count": ({"picks": shown[:1]}, "got 1 key"),
        "twice": ({"picks": [shown[0], shown[0]]}, "a key was sent twice"),
        "stray": ({"picks": [shown[0], reference]}, f"{reference!r} is not one of the items"),
        "both": ({"picks": shown[:2], "choice": "left"}, "send one of"),
        "neither": ({}, "send one of"),
    }
    for name, (body, words) in wrong.items():
        response = answer_screen(client, slug, token, query, **body)
        assert response.status_code == 422, (name, response.text)
        assert words in str(response.json()["detail"]), (name, response.text)
    assert rows_of(app, Judgement, pid) == []  # nothing refused was written

    picks = [shown[2], shown[0]]
    answered = answer_screen(client, slug, token, query, picks=picks)
    assert answered.status_code == 200, answered.text
    assert answered.json()["answered"] == 1 and not answered.json()["replayed"]
    again = answer_screen(client, slug, token, query, picks=picks)
    assert again.json()["replayed"] and again.json()["answered"] == 1

    (judgement,) = rows_of(app, Judgement, pid)
    with app.state.session_factory() as session:
        assert session.scalars(select(Rater.answers)).all() == [1]
    assert judgement.format.name == "rank" and judgement.response_time_ms == 900
    assert len(judgement.context) == 1 and len(judgement.shown) == 4 and len(judgement.chosen) == 2
    derived = rows_of(app, Triplet, pid)
    assert len(derived) == rank_triplet_count(4, 2) == 5
    assert {t.judgement_id for t in derived} == {judgement.id}
    assert {t.query_id for t in derived} == {query}
    first, second = judgement.chosen
    closer = {(t.closer_id, t.farther_id) for t in derived}
    assert (first, second) in closer  # the first pick is closer than the second
    unpicked = set(judgement.shown) - {first, second}
    assert {(pick, other) for pick in (first, second) for other in unpicked} <= closer
    assert {t.anchor_id for t in derived} == set(judgement.context)


def test_an_odd_one_out_is_one_tap_and_two_triplets(client, auth, project, app):
    pid = project["id"]
    _items(client, auth, pid, 6)
    set_rating(client, auth, pid, judgement="odd_one_out", attention_rate=0, allow_cant_tell=True)
    slug = open_link(client, auth, pid)["public_slug"]
    token = join_rater(client, slug)
    screen = next_screen(client, slug, token)
    assert screen["format"] == "odd_one_out" and screen["picks"] == 1
    assert screen["reference"] is None and len(screen["items"]) == 3
    shown = [item["key"] for item in screen["items"]]
    refused = answer_screen(client, slug, token, screen["query_id"], picks=shown[:2])
    assert refused.status_code == 422 and "the key of the odd one" in refused.text
    odd = shown[1]
    state = answer_screen(client, slug, token, screen["query_id"], picks=[odd]).json()
    (judgement,) = rows_of(app, Judgement, pid)
    assert judgement.format.name == "odd_one_out" and judgement.context == []
    derived = rows_of(app, Triplet, pid)
    assert len(derived) == 2
    assert {t.farther_id for t in derived} == set(judgement.chosen)
    # "Can't tell" on a screen: counted, nothing stored.
    follow = state["comparison"]
    tell = answer_screen(client, slug, token, follow["query_id"], choice="cant_tell")
    assert tell.status_code == 200 and tell.json()["answered"] == 2
    assert len(rows_of(app, Judgement, pid)) == 1 and len(rows_of(app, Triplet, pid)) == 2


@pytest.mark.parametrize("judgement", ["odd_one_out", "rank"])
def test_attention_checks_have_a_known_answer_in_every_format(
    client, auth, project, app, judgement
):
    """A rank check shows the reference among the items (it is the first pick); an
    odd-one-out check shows one item twice (the other one is odd). Passing and failing
    are counted as for triplets, and a check stores no judgement."""
    pid = project["id"]
    _items(client, auth, pid, 12)
    set_rating(
        client, auth, pid, judgement=judgement, shown=5, picks=2, attention_rate=1, random_share=0
    )
    slug = open_link(client, auth, pid)["public_slug"]
    token = join_rater(client, slug)
    screen = next_screen(client, slug, token)
    for turn in range(6):
        keys = [item["key"] for item in screen["items"]]
        if judgement == "rank":
            reference = screen["reference"]["key"]
            assert keys.count(reference) == 1
            others = [key for key in keys if key != reference]
            picks = [reference, others[0]] if turn % 2 == 0 else others[:2]
        else:
            assert len(set(keys)) == 2
            once = next(key for key in keys if keys.count(key) == 1)
            twice = next(key for key in keys if keys.count(key) == 2)
            picks = [once] if turn % 2 == 0 else [twice]
        state = answer_screen(client, slug, token, screen["query_id"], picks=picks)
        assert state.status_code == 200, state.text
        screen = state.json()["comparison"]
    with app.state.session_factory() as session:
        rater = session.scalars(select(Rater)).one()
        purposes = set(session.scalars(select(Assignment.purpose)))
    assert purposes == {int(Purpose.attention)}
    assert (rater.attention_passed, rater.attention_failed) == (3, 3)
    assert rows_of(app, Judgement, pid) == [] and rows_of(app, Triplet, pid) == []
    listed = client.get(f"{API}/projects/{pid}/raters/{rater.id}/answers", headers=auth).json()
    assert [answer["passed"] for answer in listed["answers"]] == [False, True] * 3
    assert {answer["format"] for answer in listed["answers"]} == {judgement}
    wanted = 2 if judgement == "rank" else 1
    assert {len(answer["picked"]) for answer in listed["answers"]} == {wanted}
    # The rater's page lists each screen with its items and picks, in order.
    signed_in_page_csrf(client, auth, f"/projects/{pid}")
    page = client.get(f"/projects/{pid}/raters/{rater.id}")
    assert page.status_code == 200 and "Items shown" in page.text
    first = listed["answers"][0]
    assert (
        " › ".join(first["picked"]) in page.text if wanted > 1 else first["picked"][0] in page.text
    )


def test_a_small_study_of_screens_ends_with_no_screen_served_twice(client, auth, project, app):
    """Five items, rank 1 of 3: the rater is served screens until none is left that they
    have not seen (by its key), then checks (as with triplets), then gets the
    no-more-work code."""
    pid = project["id"]
    _items(client, auth, pid, 5)
    set_rating(
        client,
        auth,
        pid,
        judgement="rank",
        shown=3,
        picks=1,
        attention_rate=0,
        answers_per_rater=0,
        no_more_work_code="ALL-SEEN",
    )
    slug = open_link(client, auth, pid)["public_slug"]
    token = join_rater(client, slug)
    screen = next_screen(client, slug, token)
    served = 0
    while screen is not None:
        served += 1
        assert served < 200
        state = answer_screen(
            client, slug, token, screen["query_id"], picks=[screen["items"][0]["key"]]
        )
        assert state.status_code == 200, state.text
        screen = state.json()["comparison"]
    assert state.json()["out_of_work"] and state.json()["completion_code"] == "ALL-SEEN"
    with app.state.session_factory() as session:
        keys = session.execute(
            select(Assignment.anchor_id, Assignment.lo_id, Assignment.hi_id, Assignment.purpose)
        ).all()
    assert len(keys) == len({key[:3] for key in keys}) == served
    random = [key for key in keys if key.purpose == Purpose.random]
    # Every reference with the two items of widest span it may have: 5 * C(4, 2) keys,
    # less those with no item left between lo and hi.
    ids = np.arange(5)
    possible = {
        (r, lo, hi)
        for r in ids
        for lo in ids
        for hi in ids
        if lo < hi and r not in (lo, hi) and hi - lo - 1 - (lo < r < hi) >= 1
    }
    with app.state.session_factory() as session:
        at = {item: n for n, item in enumerate(session.scalars(select(Item.id).order_by(Item.id)))}
    assert {(at[a], at[lo], at[hi]) for a, lo, hi, _ in random} == possible


def test_deleting_an_item_withdraws_the_screens_that_show_it(client, auth, project, app):
    """The item is one of a rank screen's middle items (its key names only the reference
    and the outermost): the screen is withdrawn all the same, and its answer is a 404."""
    pid = project["id"]
    _items(client, auth, pid, 8)
    set_rating(client, auth, pid, judgement="rank", shown=4, picks=1, attention_rate=0)
    slug = open_link(client, auth, pid)["public_slug"]
    token = join_rater(client, slug)
    screen = next_screen(client, slug, token)
    order = sorted((item["key"] for item in screen["items"]), key=lambda key: int(key[1:]))
    middle = order[1]
    deleted = client.delete(f"{API}/projects/{pid}/items/{middle}", headers=auth)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["queries_withdrawn"] == 1
    late = answer_screen(client, slug, token, screen["query_id"], picks=[order[0]])
    assert late.status_code == 404
    following = next_screen(client, slug, token)
    assert middle not in {item["key"] for item in following["items"]}


def test_the_rating_page_takes_picks_as_a_plain_form_and_says_what_is_missing(
    client, auth, project, app
):
    """Without scripts a rank screen's checkboxes post in display order: too few picks
    show the same screen again saying how many to pick, and nothing is stored."""
    pid = project["id"]
    _items(client, auth, pid, 10)
    set_rating(client, auth, pid, judgement="rank", shown=5, picks=2, attention_rate=0)
    slug = open_link(client, auth, pid)["public_slug"]
    instructions = client.get(f"/r/{slug}").text
    assert "Pick the 2 below that are <strong>most like</strong> the one on top" in instructions
    assert "press their numbers" in instructions
    started = client.post(f"/r/{slug}/start", data={}, follow_redirects=False)
    assert started.status_code == 303
    page = client.get(f"/r/{slug}/rate")
    assert page.status_code == 200 and 'class="pick-box"' in page.text
    query = re.search(r'name="query_id" value="(\d+)"', page.text).group(1)
    keys = re.findall(r'name="picks" value="([^"]+)" class="pick-box"', page.text)
    assert len(keys) == 5
    short = client.post(
        f"/r/{slug}/answer", data={"query_id": query, "picks": keys[:1]}, follow_redirects=False
    )
    assert short.status_code == 422
    assert "Pick 2 of the items, most alike first, then press Submit." in short.text
    assert f'name="query_id" value="{query}"' in short.text  # the same screen
    assert rows_of(app, Judgement, pid) == []
    sent = client.post(
        f"/r/{slug}/answer", data={"query_id": query, "picks": keys[1:3]}, follow_redirects=False
    )
    assert sent.status_code == 303
    (judgement,) = rows_of(app, Judgement, pid)
    with app.state.session_factory() as session:
        by_id = dict(session.execute(select(Item.id, Item.key)).all())
    assert [by_id[item] for item in judgement.chosen] == keys[1:3]


def test_a_samplers_question_is_asked_on_a_screen_around_it(client, auth, project, app):
    """In a rank study, a proposed triplet (anchor, lo, hi) is a rank screen with the
    anchor as reference and lo and hi among the items; answered, its slot is done and its
    triplets are marked adaptive (never held out)."""
    from app.models import QuerySlot, SlotState
    from app.models._types import utcnow

    pid = project["id"]
    _items(client, auth, pid, 12)
    set_rating(
        client, auth, pid, judgement="rank", shown=5, picks=2, attention_rate=0, random_share=0
    )
    slug = open_link(client, auth, pid)["public_slug"]
    with app.state.session_factory() as session:
        ids = session.scalars(select(Item.id).where(Item.project_id == pid).order_by(Item.id)).all()
        session.add(
            QuerySlot(
                project_id=pid,
                priority=int(Purpose.proposal),
                query_key=1,
                anchor_id=ids[3],
                lo_id=ids[5],
                hi_id=ids[9],
                state=SlotState.open,
                created_at=utcnow(),
            )
        )
        session.commit()
    token = join_rater(client, slug)
    first = next_screen(client, slug, token)  # a first answer holds no queue slot
    keys = [item["key"] for item in first["items"]]
    second = answer_screen(client, slug, token, first["query_id"], picks=keys[:2]).json()[
        "comparison"
    ]
    assert second["format"] == "rank" and second["reference"]["key"] == "w3"
    assert {"w5", "w9"} <= {item["key"] for item in second["items"]}
    assert len(second["items"]) == 5
    answer_screen(client, slug, token, second["query_id"], picks=["w5", "w9"])
    with app.state.session_factory() as session:
        slot = session.scalars(select(QuerySlot)).one()
        served = session.get(Assignment, second["query_id"])
        derived = session.scalars(select(Triplet).where(Triplet.query_id == served.id)).all()
    assert slot.state == SlotState.answered
    assert served.slot_id == slot.id and served.purpose == int(Purpose.proposal)
    assert len(derived) == 7 and all(t.adaptive for t in derived)
