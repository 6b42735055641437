"""CompRF builds that ask on sorting screens, through the rater API on both databases: a
build with `sort_size` m serves up to m of a node's items beside its two pivots, the
answer puts each item with a pivot (or "can't tell"), is stored as one judgement with a
triplet per item told, settles each item's slot as a triplet would, counts once when
retried, and is refused with a 422 that says what to send when its shape is wrong. With
the same answers the build grows the same forest as with one triplet per screen."""

from __future__ import annotations

import numpy as np
from sqlalchemy import select

from app.builds import service as builds
from app.core.db import unit_of_work
from app.models import Assignment, Build, BuildStatus, Judgement, QuerySlot, SlotState, Triplet
from app.simulate import _Items
from tests.support.links import open_link
from tests.support.screens import answer_screen, join_rater, next_screen, rows_of, set_rating

API = "/api/v1"


def _labelled(client, auth, project_id: int, count: int, dimensions: int = 1) -> np.ndarray:
    """`count` items labelled by half: on a line (feature: their number), or at random
    points of the plane (no ties for a noiseless rater); their features."""
    X = np.arange(count, dtype=float)[:, None]
    if dimensions > 1:
        X = np.random.default_rng(7).normal(size=(count, dimensions)).round(6)
    rows = "key,label,features\n" + "".join(
        f"p{n},{'low' if n < count // 2 else 'high'},{' '.join(map(str, X[n]))}\n"
        for n in range(count)
    )
    uploaded = client.post(
        f"{API}/projects/{project_id}/items", headers=auth, files={"file": ("p.csv", rows)}
    )
    assert uploaded.status_code == 201, uploaded.text
    return X


def _study(client, auth, project_id: int, **build) -> tuple[str, dict]:
    settings = set_rating(client, auth, project_id, attention_rate=0, random_share=0)
    assert settings.status_code == 200, settings.text
    started = client.post(f"{API}/projects/{project_id}/builds", headers=auth, json=build)
    assert started.status_code == 201, started.text
    return open_link(client, auth, project_id)["public_slug"], started.json()


def _step(app, build_id: int) -> bool:
    """One step of the build, as the worker takes it; whether the build is complete."""
    with unit_of_work(app.state.session_factory) as session:
        build = session.get(Build, build_id)
        builds.step(session=session, build=build)
        return build.status is BuildStatus.complete


def _complete(app, build_id: int) -> bool:
    with app.state.session_factory() as session:
        return session.get(Build, build_id).status is BuildStatus.complete


def _first_screen(client, slug: str, token: dict) -> dict:
    """A new rater's first query is a random triplet (joining holds no build query)."""
    first = next_screen(client, slug, token)
    assert first["format"] == "triplet"
    assert answer_screen(client, slug, token, first["query_id"], choice="left").status_code == 200
    return next_screen(client, slug, token)


def test_a_sorting_build_serves_a_nodes_items_beside_its_pivots_and_stores_one_judgement(
    client, auth, project, app
):
    pid = project["id"]
    _labelled(client, auth, pid, 30)
    refused = client.post(f"{API}/projects/{pid}/builds", headers=auth, json={"sort_size": 13})
    assert refused.status_code == 422
    slug, build = _study(client, auth, pid, n_trees=1, random_state=0, sort_size=6)
    assert build["params"]["sort_size"] == 6
    token = join_rater(client, slug)
    screen = _first_screen(client, slug, token)
    assert screen["format"] == "sort"
    assert screen["anchor"] is screen["left"] is screen["right"] is None
    assert len(screen["pivots"]) == 2 and len(screen["items"]) == 6
    pivots = [pivot["key"] for pivot in screen["pivots"]]
    keys = [item["key"] for item in screen["items"]]
    assert not set(pivots) & set(keys) and len(set(keys)) == 6
    query = screen["query_id"]

    def answered(sides):
        return answer_screen(client, slug, token, query, sides=sides)

    told = [{"key": key, "side": "left"} for key in keys]
    for wrong, says in [
        ({"picks": keys[:1]}, 'answer with "sides"'),
        ({"choice": "left"}, 'answer with "sides"'),
        ({"sides": told[:-1]}, f"no side for '{keys[-1]}'"),
        ({"sides": [*told[:-1], {"key": "nope", "side": "left"}]}, "'nope' is not one of"),
        ({"sides": [*told[:-1], told[0]]}, "was sent twice"),
        ({"sides": [*told[:-1], {"key": keys[-1], "side": "cant_tell"}]}, "does not offer"),
    ]:
        refused = answer_screen(client, slug, token, query, **wrong)
        assert refused.status_code == 422, (wrong, refused.text)
        assert says in refused.json()["detail"], refused.json()["detail"]
    bad_side = answered([*told[:-1], {"key": keys[-1], "side": "up"}])
    assert bad_side.status_code == 422
    # Another item's query of the same screen holds no screen of its own (it was a 500).
    [sibling, *_] = [row.id for row in rows_of(app, Assignment, pid) if row.screen_id == query]
    by_sibling = answer_screen(client, slug, token, sibling, sides=told)
    assert by_sibling.status_code == 422, by_sibling.text
    assert f"sorting screen {query}: answer that query_id" in by_sibling.json()["detail"]
    assert rows_of(app, Judgement, pid) == []  # nothing refused was written

    # The pivots' coordinates say which side each item belongs on.
    position = {f"p{n}": n for n in range(30)}
    left, right = (position[key] for key in pivots)
    sides = [
        {
            "key": key,
            "side": "left" if abs(position[key] - left) <= abs(position[key] - right) else "right",
        }
        for key in keys
    ]
    first = answered(sides)
    assert first.status_code == 200, first.text
    assert first.json()["answered"] == 2  # a screen counts once
    again = answered(sides)
    assert again.status_code == 200 and again.json()["replayed"] is True
    [judgement] = rows_of(app, Judgement, pid)
    assert judgement.format.name == "sort"
    ids = {key: item_id for item_id, key in _item_ids(app, pid).items()}
    assert judgement.context == [ids[pivots[0]], ids[pivots[1]]]
    assert judgement.shown == [ids[key] for key in keys]
    assert judgement.chosen == [side["side"] for side in sides]
    derived = [row for row in rows_of(app, Triplet, pid) if row.judgement_id == judgement.id]
    assert len(derived) == 6
    for row, side in zip(derived, sides, strict=True):
        closer = ids[pivots[0]] if side["side"] == "left" else ids[pivots[1]]
        assert (row.anchor_id, row.closer_id) == (ids[side["key"]], closer)
        assert {row.closer_id, row.farther_id} == {ids[pivots[0]], ids[pivots[1]]}
    # Each item was its own query: six slots answered, none left leased.
    slots = rows_of(app, QuerySlot, pid)
    answered_slots = [slot for slot in slots if slot.state is SlotState.answered]
    assert sorted(slot.anchor_id for slot in answered_slots) == sorted(ids[key] for key in keys)
    served = [row for row in rows_of(app, Assignment, pid) if query in (row.id, row.screen_id)]
    assert len(served) == 6 and all(row.answered_at is not None for row in served)
    assert [row.choice.value for row in served] == [side["side"] for side in sides]
    # The export gives the screen as shown and answered; it is not uploaded again.
    exported = client.get(f"{API}/projects/{pid}/judgements/export?format=json", headers=auth)
    [row] = exported.json()
    assert (row["format"], row["pivot_left"], row["pivot_right"]) == ("sort", *pivots)
    assert (row["items"], row["picks"]) == (keys, [side["side"] for side in sides])
    table = client.get(f"{API}/projects/{pid}/judgements/export?format=csv", headers=auth).text
    header, line = table.splitlines()
    assert header.startswith("\ufeffjudgement,format,reference,pivot_left,pivot_right,item1,")
    assert line.split(",")[1:5] == ["sort", "", *pivots]
    again = client.post(
        f"{API}/projects/{pid}/judgements", headers=auth, files={"file": ("j.csv", table)}
    )
    assert again.status_code == 422, again.text
    assert "upload its triplets instead" in again.text
    # The rater's answers, as the researcher reads them: one row per item placed.
    [rater] = client.get(f"{API}/projects/{pid}/raters", headers=auth).json()
    rows = client.get(f"{API}/projects/{pid}/raters/{rater['id']}/answers", headers=auth)
    placed = [row for row in rows.json()["answers"] if row["format"] == "sort"]
    assert sorted((row["anchor"], row["choice"]) for row in placed) == sorted(
        (side["key"], side["side"]) for side in sides
    )
    assert {(row["left"], row["right"]) for row in placed} == {tuple(pivots)}
    # The answer served the next screen of the node, with none of the items sorted.
    following = first.json()["comparison"]
    assert following["format"] == "sort" and following["query_id"] != query
    assert not {item["key"] for item in following["items"]} & set(keys)


def _item_ids(app, project_id: int) -> dict[int, str]:
    from app.models import Item

    with app.state.session_factory() as session:
        return dict(
            session.execute(select(Item.id, Item.key).where(Item.project_id == project_id)).all()
        )


def _builder_nodes(app, build_id: int) -> set:
    """The build's trees, whatever order their nodes split in: each node's tree, depth,
    items and pivots."""
    with app.state.session_factory() as session:
        builder = builds._builder(session.get(Build, build_id))
    nodes = builder.nodes
    return {
        (
            int(nodes.tree[at]),
            int(nodes.depth[at]),
            frozenset(builder.members[nodes.start[at] : nodes.end[at]].tolist()),
            int(nodes.pivot_left[at]),
            int(nodes.pivot_right[at]),
            int(nodes.status[at]),
        )
        for at in range(nodes.count)
    }


def _build_by_a_noiseless_crowd(client, auth, app, sort_size: int) -> tuple[set, int, int]:
    """A 3-tree build over 40 points answered by raters who never err, the build stepped
    after every answer as the worker would; its nodes, screens and answers."""
    pid = client.post(f"{API}/projects", headers=auth, json={"name": f"sort {sort_size}"}).json()[
        "id"
    ]
    X = _labelled(client, auth, pid, 40, dimensions=2)
    settings = {"n_trees": 3, "random_state": 5, "sort_size": sort_size}
    estimate = client.post(f"{API}/projects/{pid}/builds/estimate", headers=auth, json=settings)
    slug, build = _study(client, auth, pid, **settings)
    crowd = _Items(
        [{"key": f"p{n}", "features": X[n].tolist()} for n in range(40)], noise=0.0, seed=0
    )
    screens = 0
    while not _complete(app, build["id"]):
        token = join_rater(client, slug)
        comparison = next_screen(client, slug, token)
        while comparison is not None:
            screens += 1
            body = crowd.choose(comparison)
            answered = answer_screen(client, slug, token, comparison["query_id"], **body)
            assert answered.status_code == 200, answered.text
            if _step(app, build["id"]):
                break
            comparison = answered.json()["comparison"]
        assert screens < 5_000
    assert (
        client.get(f"{API}/projects/{pid}/builds/{build['id']}", headers=auth).json()["status"]
        == "complete"
    )
    # What the estimate said before the build started.
    expected = estimate.json()["screens"]
    assert abs(screens - expected) <= 0.25 * expected, (screens, expected)
    answers = len(rows_of(app, Triplet, pid))
    return _builder_nodes(app, build["id"]), screens, answers


def test_a_sorting_build_grows_the_same_forest_as_one_triplet_per_screen(client, auth, app):
    one, one_screens, _ = _build_by_a_noiseless_crowd(client, auth, app, sort_size=1)
    eight, eight_screens, _ = _build_by_a_noiseless_crowd(client, auth, app, sort_size=8)
    assert one == eight
    # The same queries, asked eight at a time where a node has that many.
    assert eight_screens < one_screens / 2.5, (eight_screens, one_screens)


def test_items_a_rater_cannot_tell_go_back_to_the_queue_for_another(client, auth, project, app):
    pid = project["id"]
    _labelled(client, auth, pid, 20)
    set_rating(client, auth, pid, allow_cant_tell=True)
    slug, _ = _study(client, auth, pid, n_trees=1, random_state=1, sort_size=4)
    token = join_rater(client, slug)
    screen = _first_screen(client, slug, token)
    keys = [item["key"] for item in screen["items"]]
    sides = [{"key": keys[0], "side": "left"}] + [
        {"key": key, "side": "cant_tell"} for key in keys[1:]
    ]
    answered = answer_screen(client, slug, token, screen["query_id"], sides=sides)
    assert answered.status_code == 200, answered.text
    [judgement] = rows_of(app, Judgement, pid)
    assert judgement.chosen == ["left"] + ["cant_tell"] * (len(keys) - 1)
    assert len([row for row in rows_of(app, Triplet, pid) if row.judgement_id]) == 1
    slots = {slot.anchor_id: slot for slot in rows_of(app, QuerySlot, pid)}
    ids = {key: item_id for item_id, key in _item_ids(app, pid).items()}
    assert slots[ids[keys[0]]].state is SlotState.answered
    for key in keys[1:]:  # given back, free for the next rater
        assert slots[ids[key]].state is SlotState.open
        assert slots[ids[key]].lease_rater_id is None
    other = join_rater(client, slug)
    theirs = _first_screen(client, slug, other)
    assert set(keys[1:]) <= {item["key"] for item in theirs["items"]}
    # "can't tell" for the whole screen, as a triplet's choice: every item given back.
    whole = answer_screen(client, slug, other, theirs["query_id"], choice="cant_tell")
    assert whole.status_code == 200, whole.text
    assert [row.id for row in rows_of(app, Judgement, pid)] == [judgement.id]
    slots = {slot.anchor_id: slot for slot in rows_of(app, QuerySlot, pid)}
    for item in theirs["items"]:
        slot = slots[ids[item["key"]]]
        assert (slot.state, slot.lease_rater_id) == (SlotState.open, None)


def test_an_item_deleted_after_its_build_is_cancelled_takes_its_sorting_screen_along(
    client, auth, project, app
):
    """A running build's items cannot be deleted; once it is cancelled, the second item
    of a sorting screen still on a rater's screen can: the whole screen is withdrawn
    (its answer is a 404), none of its items' assignments left behind."""
    pid = project["id"]
    _labelled(client, auth, pid, 20)
    slug, build = _study(client, auth, pid, n_trees=1, random_state=1, sort_size=4)
    token = join_rater(client, slug)
    screen = _first_screen(client, slug, token)
    keys = [item["key"] for item in screen["items"]]
    refused = client.delete(f"{API}/projects/{pid}/items/{keys[1]}", headers=auth)
    assert refused.status_code == 409
    cancelled = client.post(f"{API}/projects/{pid}/builds/{build['id']}/cancel", headers=auth)
    assert cancelled.status_code == 200, cancelled.text
    # The rater's first query (a random triplet) may have named the item too.
    gone = {key: item_id for item_id, key in _item_ids(app, pid).items()}[keys[1]]
    elsewhere = [
        row
        for row in rows_of(app, Assignment, pid)
        if gone in (row.anchor_id, row.lo_id, row.hi_id)
        and screen["query_id"] not in (row.id, row.screen_id)
    ]
    deleted = client.delete(f"{API}/projects/{pid}/items/{keys[1]}", headers=auth)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["queries_withdrawn"] == len(keys) + len(elsewhere)
    sides = [{"key": key, "side": "left"} for key in keys]
    late = answer_screen(client, slug, token, screen["query_id"], sides=sides)
    assert late.status_code == 404
    assert [row for row in rows_of(app, Assignment, pid) if row.format.name == "sort"] == []
