"""The noise ceiling (issue 57), on both databases: a screen study repeats a share of its
random screens from a pool every rater draws from, so that several raters answer the same
screens; the ceiling (the others' majority predicting each rater's choice) comes from the
judgements that share a screen, uploaded or answered, without the excluded raters, and
shows on the Models page beside each choice model's held-out accuracy."""

from __future__ import annotations

import numpy as np
import pytest

from app.formats import REPEAT_RATERS, REPEAT_SHARE, named
from app.learn.ceiling import noise_ceiling
from app.models import Assignment, Judgement, Purpose, Triplet
from tests.support.links import open_link
from tests.support.screens import answer_screen, join_rater, next_screen, rows_of, set_rating
from tests.support.workspace import signed_in_page_csrf

API = "/api/v1"


def _items(client, auth, project_id: int, count: int) -> None:
    rows = "key\n" + "".join(f"k{i}\n" for i in range(count))
    made = client.post(
        f"{API}/projects/{project_id}/items", headers=auth, files={"file": ("i.csv", rows)}
    )
    assert made.status_code == 201, made.text


def _ceiling(client, auth, project_id: int) -> dict:
    found = client.get(f"{API}/projects/{project_id}/ceiling", headers=auth)
    assert found.status_code == 200, found.text
    return found.json()


def test_a_screen_study_repeats_screens_from_its_pool_to_other_raters(client, auth, project, app):
    pid = project["id"]
    _items(client, auth, pid, 30)
    settings = client.get(f"{API}/projects/{pid}/rating", headers=auth).json()
    assert settings["repeat_share"] == REPEAT_SHARE  # a new study repeats by default
    assert _ceiling(client, auth, pid)["accuracy"] is None
    set_rating(client, auth, pid, judgement="odd_one_out", attention_rate=0, repeat_share=0.5)
    slug = open_link(client, auth, pid)["public_slug"]
    for _ in range(12):
        token = join_rater(client, slug)
        screen = next_screen(client, slug, token)
        for _ in range(6):
            keys = [item["key"] for item in screen["items"]]
            answered = answer_screen(client, slug, token, screen["query_id"], picks=[min(keys)])
            assert answered.status_code == 200, answered.text
            screen = answered.json()["comparison"]
    judgements = rows_of(app, Judgement, pid)
    assert len(judgements) == 72
    # Each judgement names its screen; a rater never gets one screen twice, and the
    # pool's screens come back to other raters.
    for judgement in judgements:
        assert judgement.screen == named("odd_one_out").screen_of([], judgement.shown)
    pairs = {(j.screen, j.rater_id) for j in judgements}
    assert len(pairs) == len(judgements)
    raters_of: dict[int, set[int]] = {}
    for judgement in judgements:
        raters_of.setdefault(judgement.screen, set()).add(judgement.rater_id)
    shared = {screen for screen, raters in raters_of.items() if len(raters) >= 2}
    # 30 items make 4,060 screens: two raters' random screens would almost never meet.
    assert len(shared) >= 2 and len(raters_of) <= 72 - len(shared)
    # The repeated screens fill in turn: the first to REPEAT_RATERS raters, then the next.
    counts = sorted((len(raters) for raters in raters_of.values()), reverse=True)
    assert counts[0] == REPEAT_RATERS and counts[1] >= 2

    # Everyone picked the first key in order: full agreement on every shared screen.
    ceiling = _ceiling(client, auth, pid)
    assert ceiling["accuracy"] == ceiling["majority_share"] == 1
    assert ceiling["low"] == ceiling["high"] == 1
    assert ceiling["screens"] == len(shared) and ceiling["why"] is None
    assert ceiling["answers"] == sum(len(raters_of[screen]) for screen in shared)


def test_a_triplet_study_repeats_questions_to_other_raters(client, auth, project, app):
    """A triplet study's random questions (those its random share draws: all of them
    here) repeat from its pool at `repeat_share`, taken by the Python scheduler on both
    databases (PostgreSQL's answer function hands those draws to it), and fill in turn;
    without a share it repeats none."""
    pid = project["id"]
    _items(client, auth, pid, 30)
    set_rating(
        client, auth, pid, attention_rate=0, random_share=1, repeat_share=0.5, answers_per_rater=0
    )
    slug = open_link(client, auth, pid)["public_slug"]
    for _ in range(12):
        token = join_rater(client, slug)
        query = client.get(f"{API}/rate/{slug}/next", headers=token).json()["comparison"]
        for _ in range(6):
            assert query["format"] == "triplet"
            # Everyone chooses the candidate whose key sorts first: full agreement.
            choice = "left" if query["left"]["key"] < query["right"]["key"] else "right"
            sent = client.post(
                f"{API}/rate/{slug}/answers",
                headers=token,
                json={"query_id": query["query_id"], "choice": choice, "response_time_ms": 900},
            )
            assert sent.status_code == 200, sent.text
            query = sent.json()["comparison"]
    served = [row for row in rows_of(app, Assignment, pid) if row.answered_at is not None]
    assert len(served) == 72
    raters_of: dict[tuple, set[int]] = {}
    for row in served:
        raters_of.setdefault((row.anchor_id, row.lo_id, row.hi_id), set()).add(row.rater_id)
    repeated = [row for row in served if row.purpose == Purpose.repeat]
    assert 20 <= len(repeated) <= 52, len(repeated)  # half of 72 questions, give or take
    assert {int(row.purpose) for row in served} == {Purpose.random, Purpose.repeat}
    # A repeated question was drawn at random: its answers are never marked adaptive.
    triplets = rows_of(app, Triplet, pid)
    assert {row.query_id for row in triplets} >= {row.id for row in repeated}
    assert not any(row.adaptive for row in triplets)
    # The pool fills in turn, the first to REPEAT_RATERS places: a place is a repeat
    # answered or held unanswered (each rater leaves holding a query, whose place stays
    # taken until its lease runs out); a random question may be one of the pool's too.
    # Counting answers of any purpose failed about one run in thirty.
    places: dict[tuple, set[int]] = {}
    for row in rows_of(app, Assignment, pid):
        if row.purpose == Purpose.repeat:
            places.setdefault((row.anchor_id, row.lo_id, row.hi_id), set()).add(row.rater_id)
    counts = sorted((len(raters) for raters in places.values()), reverse=True)
    assert counts[0] == REPEAT_RATERS and counts[1] >= 2, counts
    shared = [question for question, raters in raters_of.items() if len(raters) >= 2]
    ceiling = _ceiling(client, auth, pid)
    assert ceiling["accuracy"] == ceiling["majority_share"] == 1
    assert ceiling["screens"] == len(shared) and ceiling["why"] is None
    assert ceiling["answers"] == sum(len(raters_of[question]) for question in shared)

    other = client.post(f"{API}/projects", headers=auth, json={"name": "plain"}).json()["id"]
    _items(client, auth, other, 8)
    set_rating(client, auth, other, attention_rate=0, repeat_share=0)
    other_slug = open_link(client, auth, other)["public_slug"]
    for _ in range(3):
        token = join_rater(client, other_slug)
        state = client.get(f"{API}/rate/{other_slug}/next", headers=token).json()
        assert state["comparison"]["format"] == "triplet"
    assert {row.purpose for row in rows_of(app, Assignment, other)} == {Purpose.random}
    assert _ceiling(client, auth, other)["why"].startswith("no screen or triplet question")


def test_triplet_answers_several_raters_gave_to_one_question_give_its_ceiling(
    client, auth, project
):
    """A triplet study's ceiling comes from its questions (anchor and pair, in either
    order) that two raters or more answered: a CompRF build asks each of several, and an
    upload may hold them. Other answers, and a screen's own triplets, are left out."""
    pid = project["id"]
    _items(client, auth, pid, 12)
    rng = np.random.default_rng(7)
    rows, answers = [], []
    for number in range(30):
        anchor, b, c = (int(i) for i in rng.choice(12, 3, replace=False))
        closer_share = rng.uniform(0.5, 1.0)
        for rater in range(6):
            first = rng.random() < closer_share
            closer, farther = (b, c) if first else (c, b)
            rows.append(f"k{anchor},k{closer},k{farther},r{rater}\n")
            answers.append((number, rater, closer))
    for rater in range(6):  # questions of one rater each: no ceiling from them
        rows.append(f"k0,k{rater + 1},k{rater + 2},solo{rater}\n")
    sent = client.post(
        f"{API}/projects/{pid}/triplets",
        headers=auth,
        files={"file": ("t.csv", "anchor,closer,farther,rater\n" + "".join(rows))},
    )
    assert sent.status_code == 201, sent.text
    answers = np.array(answers)
    ceiling = _ceiling(client, auth, pid)
    offline = noise_ceiling(answers[:, 0], answers[:, 1], answers[:, 2])
    assert ceiling["why"] is None
    assert (ceiling["screens"], ceiling["raters"], ceiling["answers"]) == (30, 6, 180)
    assert ceiling["accuracy"] == pytest.approx(offline.accuracy)
    assert (ceiling["low"], ceiling["high"]) == pytest.approx((offline.low, offline.high))
    assert ceiling["within_rater_pairs"] == 0


@pytest.fixture
def things(client, auth, project):
    """A judgement file as THINGS' noise-ceiling set comes: 40 odd-one-out screens, each
    answered by 12 named raters drawing from a planted softmax, and rater r0 answering
    the first 10 screens a second time."""
    pid = project["id"]
    _items(client, auth, pid, 20)
    rng = np.random.default_rng(4)
    shown = np.array([rng.choice(20, 3, replace=False) for _ in range(40)])
    p = rng.dirichlet([1.0, 1.0, 1.0], size=40)
    rows, answers = [], []
    for raters in (range(12), [0]):
        for number, screen in enumerate(shown):
            if raters == [0] and number >= 10:
                break
            for rater in raters:
                odd = screen[rng.choice(3, p=p[number])]
                order = rng.permutation(screen)  # each rater saw it in an order of their own
                rows.append(f"odd_one_out,k{order[0]},k{order[1]},k{order[2]},k{odd},r{rater}\n")
                answers.append((number, rater, odd))
    sent = client.post(
        f"{API}/projects/{pid}/judgements",
        headers=auth,
        files={"file": ("things.csv", "format,item1,item2,item3,pick1,rater\n" + "".join(rows))},
    )
    assert sent.status_code == 201, sent.text
    return pid, np.array(answers)


def test_an_uploaded_set_of_repeated_screens_gives_the_libraries_ceiling(client, auth, things):
    pid, answers = things
    ceiling = _ceiling(client, auth, pid)
    offline = noise_ceiling(answers[:, 0], answers[:, 1], answers[:, 2])
    assert ceiling["accuracy"] == pytest.approx(offline.accuracy)
    assert ceiling["majority_share"] == pytest.approx(offline.majority_share)
    assert (ceiling["low"], ceiling["high"]) == pytest.approx((offline.low, offline.high))
    assert (ceiling["screens"], ceiling["raters"], ceiling["answers"]) == (40, 12, 480)
    assert ceiling["within_rater_pairs"] == 10
    assert ceiling["within_rater"] == pytest.approx(offline.within_rater)
    assert ceiling["low"] < ceiling["accuracy"] < ceiling["high"]

    # An excluded rater's answers are left out, as from every fit.
    raters = client.get(f"{API}/projects/{pid}/raters", headers=auth).json()
    r3 = next(rater for rater in raters if rater["external_id"] == "r3")
    excluded = client.patch(
        f"{API}/projects/{pid}/raters/{r3['id']}", headers=auth, json={"excluded": True}
    )
    assert excluded.status_code == 200, excluded.text
    kept = answers[:, 1] != 3
    without = noise_ceiling(answers[kept, 0], answers[kept, 1], answers[kept, 2])
    after = _ceiling(client, auth, pid)
    assert after["raters"] == 11 and after["accuracy"] == pytest.approx(without.accuracy)


def test_the_models_page_shows_the_ceiling_beside_a_choice_models_accuracy(
    app, client, auth, things
):
    from app.worker.loop import Worker

    pid, _ = things
    made = client.post(
        f"{API}/projects/{pid}/models",
        headers=auth,
        json={"name": "things", "kind": "choice", "params": {"n_components": 4}},
    )
    assert made.status_code == 201, made.text
    Worker(app.state.session_factory).run(until_idle=True)
    ceiling = _ceiling(client, auth, pid)
    signed_in_page_csrf(client, auth, f"/projects/{pid}/models")
    page = client.get(f"/projects/{pid}/models").text
    assert "Noise ceiling" in page
    assert f"{100 * ceiling['accuracy']:.1f}%" in page
    assert "Held-out choice accuracy" in page


def test_the_repeated_screens_are_the_same_for_every_rater():
    """Repeated screen n of a study is drawn from a source of its own: the same screen for
    every rater who gets n, while the items stay the same."""
    from app.formats import ODD_ONE_OUT, ScreenShape

    ids = np.arange(100, 130)
    study = ScreenShape(shown=3, picks=1)
    first = [ODD_ONE_OUT.repeated(study, ids, n, salt=7) for n in range(100)]
    again = [ODD_ONE_OUT.repeated(study, ids, n, salt=7) for n in range(100)]
    other = [ODD_ONE_OUT.repeated(study, ids, n, salt=8) for n in range(100)]
    assert first == again and first != other
    assert len({screen.key for screen in first}) > 90


def test_the_items_of_sorting_screens_several_raters_sorted_give_their_ceiling(
    client, auth, project, app
):
    """A CompRF build that sorts 6 items a screen and wants 2 answers a query: two raters
    each sort the root's items beside its pivots, and each item's question (the item and
    the pivots) is one of the ceiling's, as a triplet answered twice is."""
    pid = project["id"]
    rows = "key,label\n" + "".join(f"k{i},{'low' if i < 15 else 'high'}\n" for i in range(30))
    made = client.post(f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", rows)})
    assert made.status_code == 201, made.text
    assert set_rating(client, auth, pid, attention_rate=0, random_share=0).status_code == 200
    build = client.post(
        f"{API}/projects/{pid}/builds",
        headers=auth,
        json={"n_trees": 1, "random_state": 0, "sort_size": 6, "answers_per_query": 2},
    )
    assert build.status_code == 201, build.text
    slug = open_link(client, auth, pid)["public_slug"]
    for side in ("left", "right"):  # (sides by the pivots as each screen drew them)
        token = join_rater(client, slug)
        first = next_screen(client, slug, token)  # a random triplet: joining holds none
        assert (
            answer_screen(client, slug, token, first["query_id"], choice="left").status_code == 200
        )
        for _ in range(8):  # the root's items: first answers, then the second ones
            screen = next_screen(client, slug, token)
            if screen is None or screen["format"] != "sort":
                break
            sides = [{"key": item["key"], "side": side} for item in screen["items"]]
            answered = answer_screen(client, slug, token, screen["query_id"], sides=sides)
            assert answered.status_code == 200, answered.text
    sorted_ids = {row.id for row in rows_of(app, Judgement, pid) if row.format == "sort"}
    # A rater's first triplet is an answer too: now and then it is one of the root's
    # questions, which the other rater then sorts (and this one does not sort again).
    told = [
        row
        for row in rows_of(app, Triplet, pid)
        if row.judgement_id is None or row.judgement_id in sorted_ids
    ]

    def question(row) -> tuple:
        return (row.anchor_id, *sorted((row.closer_id, row.farther_id)))

    raters_of: dict[tuple, set] = {}
    for row in told:
        raters_of.setdefault(question(row), set()).add(row.rater_id)
    shared = sorted(q for q, raters in raters_of.items() if len(raters) >= 2)
    number = {q: at for at, q in enumerate(shared)}
    answers = np.array(
        [
            (number[question(row)], row.rater_id, row.closer_id)
            for row in sorted(told, key=lambda row: row.id)
            if question(row) in number
        ]
    )
    assert len(shared) >= 6  # the second rater sorted the first one's items again
    ceiling = _ceiling(client, auth, pid)
    offline = noise_ceiling(answers[:, 0], answers[:, 1], answers[:, 2])
    assert (ceiling["screens"], ceiling["raters"]) == (len(shared), 2)
    assert ceiling["answers"] == 2 * len(shared)
    assert ceiling["why"] is None
    assert ceiling["accuracy"] == pytest.approx(offline.accuracy)
    assert (ceiling["low"], ceiling["high"]) == pytest.approx((offline.low, offline.high))
