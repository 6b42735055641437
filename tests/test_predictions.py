"""Predictions from a finished build, on both databases: new items routed down the
forest by a client answering the routing queries (the same labels as the library's own
routing), or by raters, who get routing queries before anything else."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from app.builds.jobs import step_answered_routings, sweep
from app.learn import FeatureOracle
from app.models import Assignment, Item, Purpose, QuerySlot, Routing, SlotState
from app.worker.loop import Worker
from tests.support.builds import answer_build, answering_oracle
from tests.support.builds import finished_build as finished_build_of
from tests.support.links import open_link
from tests.support.rating import join_answered

API = "/api/v1"


@pytest.fixture
def blobs():
    return make_blobs(n_samples=70, centers=3, cluster_std=1.0, random_state=2)


@pytest.fixture
def finished_build(app, client, auth, project, blobs):
    """A 3-tree build on 50 labelled items, answered by a feature oracle through the
    API; 20 items are left unlabelled. Returns (project id, build id, keys)."""
    X, y = blobs
    return finished_build_of(app, client, auth, project["id"], X, y)


def test_a_client_answers_the_routing_and_gets_the_librarys_labels(
    app, client, auth, finished_build, blobs
):
    project_id, build_id, keys = finished_build
    X, _ = blobs
    started = client.post(
        f"{API}/projects/{project_id}/builds/{build_id}/routings",
        headers=auth,
        json={"ask_raters": False},
    )
    assert started.status_code == 201, started.text
    routed = started.json()
    assert routed["status"] == "routing" and routed["progress"]["items"] == 20
    oracle = answering_oracle(X, keys)
    base = f"{API}/projects/{project_id}/routings/{routed['id']}"
    for _ in range(40):
        queries = client.get(f"{base}/queries", headers=auth).json()
        if not queries:
            break
        response = client.post(
            f"{base}/answers", headers=auth, json={"answers": [oracle(q) for q in queries]}
        )
        assert response.status_code == 200, response.text
    routed = client.get(base, headers=auth).json()
    assert routed["status"] == "complete", routed["progress"]
    from app.builds import service
    from app.models import Build

    with app.state.session_factory() as session:
        build = session.get(Build, build_id)
        forest = service.forest(build)
        training = service.item_ids(build)
    # The library routes the same new items with the same oracle.
    index = {key: i for i, key in enumerate(keys)}
    by_id = {int(item_id): i for i, item_id in enumerate(training)}
    new = [f"p{i}" for i in range(50, 70)]
    X_forest = np.concatenate([X[[index[f"p{i}"] for i in range(50)]], X[50:]])
    assert len(by_id) == 50
    expected = forest.predict(np.arange(50, 70), FeatureOracle(X_forest))
    assert [routed["result"][key]["label"] for key in new] == list(expected)
    assert all(abs(sum(p["proba"].values()) - 1) < 1e-9 for p in routed["result"].values())
    # Nothing went to the raters' queue.
    with app.state.session_factory() as session:
        assert session.query(Assignment).count() == 0


def test_raters_get_routing_queries_first(app, client, auth, finished_build):
    project_id, build_id, _ = finished_build
    routed = client.post(
        f"{API}/projects/{project_id}/builds/{build_id}/routings",
        headers=auth,
        json={"items": ["p55", "p60"]},
    ).json()
    assert routed["progress"]["items"] == 2
    slug = open_link(client, auth, project_id)["public_slug"]
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"attention_rate": 0, "random_share": 0},
    )
    _, joined = join_answered(client, slug, participant="r")  # the first is a random one
    assert joined["comparison"]["anchor"]["key"] in ("p55", "p60")
    with app.state.session_factory() as session:
        purposes = [a.purpose for a in session.query(Assignment).order_by(Assignment.id)]
        assert purposes == [Purpose.random, Purpose.routing]


def test_an_idle_worker_steps_a_routing_once_answers_about_its_items_arrive(
    app, client, auth, finished_build, blobs
):
    """Answers to a routing's queries that no step read (here a triplet file's) are read
    by an idle worker's check within a poll, a tree level at a time, until the routing is
    complete; a routing nothing new was answered about is left as it was."""
    project_id, build_id, keys = finished_build
    X, _ = blobs
    oracle = answering_oracle(X, keys)
    started = client.post(
        f"{API}/projects/{project_id}/builds/{build_id}/routings",
        headers=auth,
        json={"items": ["p55", "p60"], "ask_raters": False},
    ).json()
    base = f"{API}/projects/{project_id}/routings/{started['id']}"
    sessions = app.state.session_factory

    def cursor() -> int:
        with sessions() as session:
            return session.get(Routing, started["id"]).answers_cursor

    read_at_start = cursor()
    step_answered_routings(sessions)
    assert cursor() == read_at_start and client.get(base, headers=auth).json() == started
    for level in range(40):
        queries = client.get(f"{base}/queries", headers=auth).json()
        if not queries:
            break
        answers = "".join(",".join(oracle(query)) + "\n" for query in queries)
        stored = client.post(
            f"{API}/projects/{project_id}/triplets",
            headers=auth,
            files={"file": (f"level{level}.csv", "anchor,closer,farther\n" + answers)},
        )
        assert stored.status_code == 201, stored.text
        read_before = cursor()
        step_answered_routings(sessions)
        assert cursor() > read_before  # the check read the level's answers
    routed = client.get(base, headers=auth).json()
    assert routed["status"] == "complete", routed["progress"]
    assert set(routed["result"]) == {"p55", "p60"}


def test_a_routing_still_answers_at_its_old_prediction_paths(app, client, auth, finished_build):
    """Clients and poll links written when a routing was called a prediction keep working;
    the API's description marks those paths deprecated and names the new ones."""
    project_id, build_id, _ = finished_build
    old = client.post(
        f"{API}/projects/{project_id}/builds/{build_id}/predictions",
        headers=auth,
        json={"items": ["p55"], "ask_raters": False},
    )
    assert old.status_code == 201, old.text
    routing_id = old.json()["id"]
    new_path = f"{API}/projects/{project_id}/routings/{routing_id}"
    old_path = f"{API}/projects/{project_id}/predictions/{routing_id}"
    assert client.get(old_path, headers=auth).json() == client.get(new_path, headers=auth).json()
    assert (
        client.get(f"{old_path}/queries", headers=auth).json()
        == client.get(f"{new_path}/queries", headers=auth).json()
        != []
    )
    paths = client.get("/openapi.json").json()["paths"]
    assert paths[f"{API}/projects/{{project_id}}/predictions/{{routing_id}}"]["get"]["deprecated"]
    assert (
        "deprecated" not in paths[f"{API}/projects/{{project_id}}/routings/{{routing_id}}"]["get"]
    )


def test_bad_predictions_are_refused_with_reasons(client, auth, finished_build, project):
    project_id, build_id, _ = finished_build
    base = f"{API}/projects/{project_id}/builds/{build_id}/routings"
    unknown = client.post(base, headers=auth, json={"items": ["p1", "nope"]})
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
    empty = client.post(base, headers=auth, json={"items": []})
    assert empty.status_code == 400 and "empty" in empty.json()["detail"]
    running = client.post(
        f"{API}/projects/{project_id}/builds", headers=auth, json={"n_trees": 1}
    ).json()
    early = client.post(
        f"{API}/projects/{project_id}/builds/{running['id']}/routings", headers=auth, json={}
    )
    assert early.status_code == 409 and "complete" in early.json()["detail"]
    routed = client.post(base, headers=auth, json={"ask_raters": False}).json()
    answers = f"{API}/projects/{project_id}/routings/{routed['id']}/answers"
    assert client.post(answers, headers=auth, json={"answers": []}).status_code == 422
    wrong = client.post(answers, headers=auth, json={"answers": [["p1", "p2", "zz"]]})
    assert wrong.status_code == 400 and "zz" in wrong.json()["detail"]


def test_a_comprf_model_follows_its_build_and_predicts_by_routing(
    app, client, auth, finished_build
):
    project_id, build_id, keys = finished_build
    model = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={"name": "forest", "kind": "comprf", "build_id": build_id},
    ).json()
    assert model["serving"]["status"] == "ready" and model["auto_refit"] is False
    assert model["serving"]["metrics"]["trees"] == 3
    response = client.post(
        f"{API}/projects/{project_id}/models/{model['id']}/predict",
        headers=auth,
        json={"items": keys[50:55], "ask_raters": False},
    )
    assert response.status_code == 202, response.text
    started = response.json()
    assert started["routing"]["status"] == "routing"
    poll = client.get(started["poll"], headers=auth)
    assert poll.status_code == 200 and poll.json()["id"] == started["routing"]["id"]
    train = client.post(f"{API}/projects/{project_id}/models/{model['id']}/train", headers=auth)
    assert train.status_code == 409 and "grows with its build" in train.text
    distances = client.post(
        f"{API}/projects/{project_id}/models/{model['id']}/distances",
        headers=auth,
        json={"pairs": [[keys[0], keys[1]]]},
    )
    assert distances.status_code == 400


def test_training_items_are_routed_by_the_answers_the_build_holds(
    app, client, auth, finished_build
):
    """The build asked about every training item at every node it reached: predicting
    them asks nobody anything."""
    project_id, build_id, keys = finished_build
    started = client.post(
        f"{API}/projects/{project_id}/builds/{build_id}/routings",
        headers=auth,
        json={"items": keys[:10]},
    )
    assert started.status_code == 201, started.text
    routed = started.json()
    assert routed["status"] == "complete", routed["progress"]
    assert routed["progress"]["queries_pending"] == 0
    assert set(routed["result"]) == set(keys[:10])
    with app.state.session_factory() as session:
        assert session.query(QuerySlot).filter(QuerySlot.routing_id.is_not(None)).count() == 0


def test_raters_answers_complete_a_routing(app, client, auth, finished_build, blobs):
    """Routing queries served to raters and answered by them finish the routing, with
    the labels the library's own routing gives, and stop being served."""
    project_id, build_id, keys = finished_build
    X, _ = blobs
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"attention_rate": 0, "random_share": 0},
    )
    wanted = ["p55", "p60", "p3"]  # two new items and a training one
    base = f"{API}/projects/{project_id}/builds/{build_id}/routings"
    routed = client.post(base, headers=auth, json={"items": wanted}).json()
    assert routed["status"] == "routing"
    slug = open_link(client, auth, project_id)["public_slug"]
    oracle = answering_oracle(X, keys)
    routing_answers = 0
    for rater_number in range(20):
        joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": f"r{rater_number}"})
        token = {"X-Rater-Token": joined.json()["rater_token"]}
        state = client.get(f"{API}/rate/{slug}/next", headers=token).json()

        def answer_truly(comparison):
            closer = oracle(
                {role: comparison[role]["key"] for role in ("anchor", "left", "right")}
            )[1]
            choice = "left" if closer == comparison["left"]["key"] else "right"
            return client.post(
                f"{API}/rate/{slug}/answers",
                headers=token,
                json={"query_id": comparison["query_id"], "choice": choice},
            ).json()

        state = answer_truly(state["comparison"])  # a rater's first query is a random one
        while state["comparison"] is not None and state["comparison"]["anchor"]["key"] in wanted:
            state = answer_truly(state["comparison"])
            routing_answers += 1
            Worker(app.state.session_factory).run(until_idle=True)
        sweep(app.state.session_factory)
        done = client.get(f"{API}/projects/{project_id}/routings/{routed['id']}", headers=auth)
        if done.json()["status"] == "complete":
            break
    result = done.json()
    assert result["status"] == "complete", result["progress"]
    assert 0 < routing_answers <= 3 * 40  # about one query per tree level, each asked once
    with app.state.session_factory() as session:
        open_slots = (
            session.query(QuerySlot)
            .filter(QuerySlot.routing_id == routed["id"], QuerySlot.state == SlotState.open)
            .count()
        )
        from app.builds import service
        from app.models import Build

        build = session.get(Build, build_id)
        forest = service.forest(build)
        training = [int(i) for i in service.item_ids(build)]
        ids = dict(session.query(Item.key, Item.id).filter(Item.project_id == project_id).all())
    assert open_slots == 0
    # The library routes the same items with the same oracle.
    index = {key: i for i, key in enumerate(keys)}
    key_of = {item_id: key for key, item_id in ids.items()}
    order = [index[key_of[item_id]] for item_id in training] + [index["p55"], index["p60"]]
    positions = [len(training), len(training) + 1, training.index(ids["p3"])]
    expected = forest.predict(np.array(positions), FeatureOracle(X[order]))
    assert [result["result"][key]["label"] for key in wanted] == list(expected)


def test_a_forests_labels_download_once_routed_and_even_splits_are_ties(
    app, client, auth, finished_build, blobs
):
    """A CompRF model's predictions download holds its newest complete routing; an item
    whose trees disagree evenly gets no label, its tied classes listed, in the routing
    and in the download."""
    project_id, _, keys = finished_build
    X, _ = blobs
    build_id = client.post(
        f"{API}/projects/{project_id}/builds", headers=auth, json={"n_trees": 2, "random_state": 3}
    ).json()["id"]
    answer_build(app, client, auth, project_id, build_id, answering_oracle(X, keys))
    model = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={"name": "forest", "kind": "comprf", "build_id": build_id},
    ).json()
    export = f"{API}/projects/{project_id}/models/{model['id']}/predictions/export"
    early = client.get(export, headers=auth)
    assert early.status_code == 409 and "labelled nothing yet" in early.json()["detail"]

    # Answers by a rule unrelated to the items (a checksum's parity: a coin that lands
    # the same way on every run) send an item to leaves that need not agree across the
    # two trees: over 20 items, some land in two classes, one per tree.
    wanted = keys[50:70]
    started = client.post(
        f"{API}/projects/{project_id}/models/{model['id']}/predict",
        headers=auth,
        json={"items": wanted, "ask_raters": False},
    ).json()
    base = f"{API}/projects/{project_id}/routings/{started['routing']['id']}"
    for _ in range(40):
        queries = client.get(f"{base}/queries", headers=auth).json()
        if not queries:
            break
        picked = [
            [q["anchor"], q["left"], q["right"]]
            if zlib.crc32(f"{q['anchor']} {q['left']} {q['right']}".encode()) % 2
            else [q["anchor"], q["right"], q["left"]]
            for q in queries
        ]
        assert client.post(f"{base}/answers", headers=auth, json={"answers": picked}).is_success
    routed = client.get(base, headers=auth).json()
    assert routed["status"] == "complete"
    result = routed["result"]
    for found in result.values():
        top = max(found["proba"].values())
        leaders = sorted(c for c, p in found["proba"].items() if abs(p - top) < 1e-9)
        if len(leaders) > 1:
            assert found["label"] is None and sorted(found["tied"]) == leaders
        else:
            assert found["label"] == leaders[0] and found["tied"] is None
    assert any(found["label"] is None for found in result.values())

    table = client.get(export, headers=auth)
    assert table.status_code == 200 and "attachment" in table.headers["content-disposition"]
    lines = table.text.splitlines()
    assert lines[0] == "key,label,probability,support,tied" and len(lines) == 1 + len(wanted)
    for line in lines[1:]:
        key, label, probability, support, tied = line.split(",")
        found = result[key]
        assert label == (found["label"] or "") and support == "2"
        assert tied == " | ".join(found["tied"] or [])
        if label:
            assert float(probability) == pytest.approx(found["proba"][label], rel=1e-5)
    listed = client.get(export, headers=auth, params={"format": "json"}).json()
    assert {row["key"]: row["label"] for row in listed} == {
        key: found["label"] for key, found in result.items()
    }


def test_a_build_that_takes_a_deleted_builds_id_routes_with_its_own_forest(
    app, client, auth, finished_build, blobs
):
    """SQLite gives a new row the id of the newest deleted one: a project deleted with
    its build, then a new build, must not be routed with the forest this process kept
    for the deleted one."""
    project_id, build_id, keys = finished_build
    X, y = blobs
    first = client.post(
        f"{API}/projects/{project_id}/builds/{build_id}/routings",
        headers=auth,
        json={"items": keys[:5]},
    ).json()
    assert first["status"] == "complete"  # training items: routed by the build's answers
    assert client.delete(f"{API}/projects/{project_id}", headers=auth).status_code == 204

    renamed = {0: "zero", 1: "one", 2: "two"}
    rows = ["key,label,features"] + [
        f"{keys[i]},{renamed[y[i]] if i < 50 else ''},{X[i, 0]} {X[i, 1]}" for i in range(len(X))
    ]
    again = client.post(f"{API}/projects", json={"name": "again"}, headers=auth).json()["id"]
    uploaded = client.post(
        f"{API}/projects/{again}/items", headers=auth, files={"file": ("b.csv", "\n".join(rows))}
    )
    assert uploaded.status_code == 201, uploaded.text
    build = client.post(
        f"{API}/projects/{again}/builds", headers=auth, json={"n_trees": 3, "random_state": 1}
    ).json()
    answer_build(app, client, auth, again, build["id"], answering_oracle(X, keys))
    second = client.post(
        f"{API}/projects/{again}/builds/{build['id']}/routings",
        headers=auth,
        json={"items": keys[:5]},
    ).json()
    assert second["status"] == "complete"
    assert {found["label"] for found in second["result"].values()} <= set(renamed.values())
