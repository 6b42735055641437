"""CompRF builds in the service, on both databases: answers that arrive in the triplets
table grow the forest step by step; the state survives a restart; pause and cancel hold."""

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sqlalchemy import func, select

from app.builds import service
from app.builds.jobs import request_answered_steps, request_step, sweep
from app.builds.service import BuildParams
from app.builds.warm import WarmBuilds
from app.core import caches
from app.core.db import unit_of_work
from app.core.errors import Conflict, ServiceError
from app.learn import CompRF, FeatureOracle
from app.models import (
    Build,
    BuildStatus,
    Item,
    Job,
    Project,
    QuerySlot,
    SlotState,
    Split,
    Triplet,
    TripletSource,
)
from app.worker.loop import Worker


@pytest.fixture
def sessions(app):
    return app.state.session_factory


@pytest.fixture
def blobs():
    X, y = make_blobs(n_samples=80, centers=3, cluster_std=1.0, random_state=0)
    return X, y


@pytest.fixture
def labelled_project(sessions, project, blobs):
    """80 labelled items, 20 of them in the test split; returns (project id, item ids)."""
    X, y = blobs
    with unit_of_work(sessions) as session:
        items = [
            Item(
                project_id=project["id"],
                key=f"item-{i}",
                label=str(y[i]),
                features=X[i].tobytes(),
                split=Split.test if i >= 60 else Split.train,
            )
            for i in range(len(X))
        ]
        session.add_all(items)
        session.flush()
        return project["id"], np.array([item.id for item in items])


def answer(sessions, project_id, ids, queries, oracle):
    """Raters (here a feature oracle) answer `queries` given as item ids."""
    position = {int(item): i for i, item in enumerate(ids)}
    local = np.vectorize(position.__getitem__)(queries)
    store_answers(sessions, project_id, ids[oracle.answer(local)])


def store_answers(sessions, project_id, answers) -> None:
    """Answers ``(anchor, closer, farther)`` given as item ids arrive in the triplets table."""
    with unit_of_work(sessions) as session:
        session.add_all(
            Triplet(
                project_id=project_id,
                anchor_id=int(a),
                closer_id=int(c),
                farther_id=int(f),
                source=TripletSource.oracle,
            )
            for a, c, f in answers
        )


def start(session, project_id, **params) -> Build:
    project = session.get(Project, project_id)
    return service.start_build(session=session, project=project, params=BuildParams(**params))


def run_to_completion(sessions, build_id, project_id, ids, oracle, max_rounds=200) -> int:
    for rounds in range(max_rounds):
        # A fresh session each round: nothing survives between steps but the database.
        with unit_of_work(sessions) as session:
            build = session.get(Build, build_id)
            if build.status is BuildStatus.complete:
                return rounds
            queries = service.pending_queries(session=session, build=build)
        answer(sessions, project_id, ids, queries, oracle)
        with unit_of_work(sessions) as session:
            service.step(session=session, build=session.get(Build, build_id))
    raise AssertionError("the build did not complete")


def test_answers_grow_the_forest_as_the_library_builds_it_offline(
    sessions, labelled_project, blobs
):
    X, y = blobs
    project_id, ids = labelled_project
    with unit_of_work(sessions) as session:
        build = start(session, project_id, n_trees=5, leaf_size=2, random_state=3)
        build_id = build.id
        assert build.status is BuildStatus.running and build.queries_pending > 0
    rounds = run_to_completion(sessions, build_id, project_id, ids, FeatureOracle(X))
    with sessions() as session:
        build = session.get(Build, build_id)
        assert build.status is BuildStatus.complete and build.queries_pending == 0
        assert build.progress["done_share"] == 1.0
        online = service.forest(build)
    offline = CompRF(n_trees=5, leaf_size=2, random_state=3).fit(
        np.arange(60), y[:60].astype(str), FeatureOracle(X)
    )
    assert rounds > 3 and online.n_queries_ == offline.n_queries_
    test = np.arange(60, 80)
    assert np.array_equal(
        online.predict(test, FeatureOracle(X)), offline.predict(test, FeatureOracle(X))
    )


def test_answers_held_before_the_build_are_not_asked_again(sessions, labelled_project, blobs):
    X, _ = blobs
    project_id, ids = labelled_project
    params = {"n_trees": 3, "leaf_size": 2, "random_state": 1}
    with unit_of_work(sessions) as session:
        first = start(session, project_id, **params)
        asked = service.pending_queries(session=session, build=first)
    answer(sessions, project_id, ids, asked, FeatureOracle(X))
    with unit_of_work(sessions) as session:
        again = start(session, project_id, **params)
        still = service.pending_queries(session=session, build=again)
        assert again.queries_answered == len(asked)
        held = {tuple(row) for row in asked}
        assert not any(tuple(row) in held for row in still)


@pytest.fixture
def first_answers(sessions, labelled_project, blobs):
    """A 2-tree build whose first queries have been answered; (build id, those queries)."""
    X, _ = blobs
    project_id, ids = labelled_project
    with unit_of_work(sessions) as session:
        build = start(session, project_id, n_trees=2, random_state=0)
        build_id = build.id
        queries = service.pending_queries(session=session, build=build)
    answer(sessions, project_id, ids, queries, FeatureOracle(X))
    return build_id, queries


def test_a_step_that_lost_a_race_saves_nothing_and_pause_and_cancel_hold(sessions, first_answers):
    build_id, queries = first_answers
    with unit_of_work(sessions) as first, unit_of_work(sessions) as second:
        one, two = first.get(Build, build_id), second.get(Build, build_id)
        assert service.step(session=first, build=one) == len(queries)
        first.commit()
        assert service.step(session=second, build=two) == 0  # its version is stale
    with unit_of_work(sessions) as session:
        build = session.get(Build, build_id)
        assert build.queries_answered == len(queries)
        service.set_status(session=session, build=build, status=BuildStatus.paused)
        assert len(service.pending_queries(session=session, build=build)) == 0
        service.set_status(session=session, build=build, status=BuildStatus.running)
        service.set_status(session=session, build=build, status=BuildStatus.cancelled)
        with pytest.raises(Conflict, match="cancelled"):
            service.set_status(session=session, build=build, status=BuildStatus.running)
        with pytest.raises(Conflict, match="cancelled"):
            service.forest(build)


def test_a_project_without_labels_cannot_start_a_build(sessions, project):
    with unit_of_work(sessions) as session:
        with pytest.raises(ServiceError, match="at least 2 labelled items"):
            start(session, project["id"])


def test_a_worker_step_folds_new_answers_and_steps_are_not_queued_twice(sessions, first_answers):
    build_id, queries = first_answers
    with unit_of_work(sessions) as session:
        build = session.get(Build, build_id)
        first = request_step(session=session, build=build)
        assert request_step(session=session, build=build).id == first.id
    assert Worker(sessions).run(until_idle=True) == 1
    with sessions() as session:
        assert session.get(Build, build_id).queries_answered == len(queries)
        job = session.get(Job, first.id)
        assert job.status.value == "succeeded" and job.result["answers_read"] == len(queries)


def test_a_large_build_spaces_its_steps_and_the_sweep_reads_what_waited(
    sessions, first_answers, labelled_project, blobs, monkeypatch
):
    """A build waiting for a large queue (here: any) steps at most every ten times
    what its last warm step took: a step asked for sooner reads nothing, and the answers
    it left wait for the next request or the sweep. A process's first step (a load of
    the whole build) does not count, and a small build steps at every request."""
    from app.builds import warm

    build_id, queries = first_answers
    project_id, ids = labelled_project
    oracle = FeatureOracle(blobs[0])
    caches.current().drop("builds.warm")  # a worker that has not stepped this build yet
    held = caches.current().get("builds.warm", WarmBuilds)
    monkeypatch.setattr(warm, "FRESH_PROGRESS_QUERIES", 1)
    monkeypatch.setattr(warm, "MOST_STEP_WAIT", 1e9)
    held.step_spacing = 1e6  # each step "takes" a while

    def step_job() -> dict:
        with unit_of_work(sessions) as session:
            job_id = request_step(session=session, build=session.get(Build, build_id)).id
        assert Worker(sessions, upkeep=False).run(until_idle=True) == 1
        with sessions() as session:
            return session.get(Job, job_id).result

    with unit_of_work(sessions) as session:
        more = service.pending_queries(session=session, build=session.get(Build, build_id))
    assert step_job()["answers_read"] == len(queries)  # loads the build: not timed
    answer(sessions, project_id, ids, more[:5], oracle)
    assert step_job()["answers_read"] == 5  # the first warm step: timed
    answer(sessions, project_id, ids, more[5:8], oracle)
    assert step_job() == {"answers_read": 0, "status": "running", "spaced_out": True}
    with unit_of_work(sessions) as session:
        assert service.has_unread_answers(session=session, build=session.get(Build, build_id))

    held.step_spacing = 0.0  # time passes
    sweep(sessions)
    assert Worker(sessions, upkeep=False).run(until_idle=True) == 1
    with unit_of_work(sessions) as session:
        build = session.get(Build, build_id)
        assert not service.has_unread_answers(session=session, build=build)

    monkeypatch.setattr(warm, "FRESH_PROGRESS_QUERIES", 100_000)
    held.step_spacing = 1e6
    answer(sessions, project_id, ids, more[8:11], oracle)
    assert step_job()["answers_read"] == 3  # a small build's queue: no spacing


def test_an_idle_worker_asks_for_a_step_once_answers_for_a_build_arrive(
    sessions, first_answers, labelled_project, blobs, monkeypatch
):
    """A crowd answers a tree level in a burst, and the web processes ask for a step at
    most every half second each: the burst's last answers are read by the idle worker's
    check within a poll, not the sweep's seconds later. Nothing answered, or a large
    build spacing its steps, and the check asks for none."""
    build_id, _ = first_answers
    project_id, ids = labelled_project
    oracle = FeatureOracle(blobs[0])
    held = caches.current().get("builds.warm", WarmBuilds)

    def checked() -> int:
        """The steps the check asked for (each run by the worker)."""
        caches.current().drop("builds.recent_steps")  # half a second passed
        request_answered_steps(sessions)
        return Worker(sessions, upkeep=False).run(until_idle=True)

    def unread() -> bool:
        with sessions() as session:
            return service.has_unread_answers(session=session, build=session.get(Build, build_id))

    assert checked() == 1 and not unread()  # the first answers
    assert checked() == 0  # nothing new
    for level in range(3):
        with unit_of_work(sessions) as session:
            more = service.pending_queries(session=session, build=session.get(Build, build_id))
        answer(sessions, project_id, ids, more, oracle)
        assert unread()
        assert checked() == 1 and not unread(), level
    from app.builds import warm

    answer(sessions, project_id, ids, more[:1], oracle)
    monkeypatch.setattr(warm, "FRESH_PROGRESS_QUERIES", 1)  # a large queue (here: any)
    monkeypatch.setattr(warm, "MOST_STEP_WAIT", 1e9)
    held.step_spacing = 1e6  # and its step "took" long: it waits its turn
    assert checked() == 0 and unread()
    held.step_spacing = 0.0
    assert checked() == 1 and not unread()


def test_a_worker_that_dies_between_saves_loses_nothing(sessions, labelled_project, blobs):
    """Steps save the build every few seconds only; a worker that dies in between leaves
    the answers since the last save in the triplets table, and the next step, in a fresh
    process, folds them in again: the forest is the offline one."""
    X, y = blobs
    project_id, ids = labelled_project
    with unit_of_work(sessions) as session:
        build_id = start(session, project_id, n_trees=3, random_state=5).id
    saved = []
    for _ in range(200):
        with unit_of_work(sessions) as session:
            build = session.get(Build, build_id)
            if build.status is BuildStatus.complete:
                break
            queries = service.pending_queries(session=session, build=build)
            saved.append(build.version)
        answer(sessions, project_id, ids, queries, FeatureOracle(X))
        with unit_of_work(sessions) as session:
            service.step(session=session, build=session.get(Build, build_id))
        if len(saved) % 3 == 0:
            caches.current().drop("builds.warm")  # the worker died: its memory is gone
    assert len(set(saved)) < len(saved)  # some steps did not save the state
    with sessions() as session:
        online = service.forest(session.get(Build, build_id))
    offline = CompRF(n_trees=3, random_state=5).fit(
        np.arange(60), y[:60].astype(str), FeatureOracle(X)
    )
    assert online.n_queries_ == offline.n_queries_
    test = np.arange(60, 80)
    assert np.array_equal(
        online.predict(test, FeatureOracle(X)), offline.predict(test, FeatureOracle(X))
    )


def test_answers_a_worker_read_but_did_not_save_are_saved_once_they_stop_coming(
    sessions, first_answers, labelled_project, blobs
):
    """A step saves the build every few seconds only. When the answers stop, no further
    answer asks for a step: the worker's sweep asks for one once a save is due, so the
    saved build (what pages, exports and a restarted worker read) catches up."""
    build_id, _ = first_answers
    project_id, ids = labelled_project
    with unit_of_work(sessions) as session:
        service.step(session=session, build=session.get(Build, build_id))  # saves (first)
        queries = service.pending_queries(session=session, build=session.get(Build, build_id))
    answer(sessions, project_id, ids, queries, FeatureOracle(blobs[0]))
    with unit_of_work(sessions) as session:
        service.step(session=session, build=session.get(Build, build_id))  # not saved yet
    with sessions() as session:
        newest = session.scalar(select(func.max(Triplet.id)))
        assert session.get(Build, build_id).answers_cursor < newest
    sweep(sessions)  # nothing new to read, and no save due yet: no step
    assert Worker(sessions, upkeep=False).run(until_idle=True) == 0

    held = caches.current().get("builds.warm", WarmBuilds)
    held.save_seconds = held.upkeep_spacing = held.save_spacing = 0.0  # time passes
    sweep(sessions)
    assert Worker(sessions, upkeep=False).run(until_idle=True) == 1
    with sessions() as session:
        assert session.get(Build, build_id).answers_cursor >= newest
    sweep(sessions)  # saved: nothing more to do
    assert Worker(sessions, upkeep=False).run(until_idle=True) == 0


def test_the_estimate_before_a_build_is_what_it_then_asks(
    client, auth, sessions, labelled_project, blobs
):
    """POST .../builds/estimate says what a build would ask before it starts; started
    and answered by raters (an oracle), the build asks about that many (60 training
    items, four trees of leaf size 2, two answers per query)."""
    project_id, ids = labelled_project
    X, _ = blobs
    settings = {"n_trees": 4, "leaf_size": 2, "answers_per_query": 2, "random_state": 3}
    estimated = client.post(
        f"/api/v1/projects/{project_id}/builds/estimate", headers=auth, json=settings
    )
    assert estimated.status_code == 200, estimated.text
    guess = estimated.json()
    assert guess["items"] == 60 and guess["items_per_tree"] == 60
    assert guess["answers"] == 2 * guess["queries"] and guess["hours"] is None
    assert client.get(f"/api/v1/projects/{project_id}/builds", headers=auth).json() == []

    bad = client.post(
        f"/api/v1/projects/{project_id}/builds/estimate", headers=auth, json={"n_trees": 0}
    )
    assert bad.status_code == 422 and "n_trees" in bad.text

    build = client.post(f"/api/v1/projects/{project_id}/builds", headers=auth, json=settings)
    build_id = build.json()["id"]
    oracle = FeatureOracle(X[:60])
    run_to_completion(sessions, build_id, project_id, ids[:60], oracle)
    with unit_of_work(sessions) as session:
        asked = session.query(Triplet).filter(Triplet.project_id == project_id).count()
    assert abs(asked - guess["answers"]) <= 0.2 * guess["answers"], (asked, guess["answers"])

    page = client.get(f"/projects/{project_id}/builds", headers=auth).text
    assert "answers</strong> from raters" in page


def test_a_query_whose_answers_tie_is_asked_again_at_the_next_step(sessions, labelled_project):
    """Two answers to one query that disagree (it was asked twice: a step read the first
    after it had put the query in the queue again) want one more: the next step puts it
    back in the queue at once, not half a minute later at the next full comparison."""
    project_id, ids = labelled_project
    with unit_of_work(sessions) as session:
        build = start(session, project_id, n_trees=1, random_state=0)
        build_id = build.id
    with unit_of_work(sessions) as session:
        slot = session.scalars(
            select(QuerySlot)
            .where(QuerySlot.build_id == build_id, QuerySlot.state == SlotState.open)
            .order_by(QuerySlot.id)
            .limit(1)
        ).one()
        slot.state = SlotState.answered
        query = (slot.anchor_id, slot.lo_id, slot.hi_id)
        session.add_all(
            Triplet(
                project_id=project_id,
                anchor_id=query[0],
                closer_id=closer,
                farther_id=farther,
                source=TripletSource.oracle,
            )
            for closer, farther in ((query[1], query[2]), (query[2], query[1]))
        )
    with unit_of_work(sessions) as session:
        service.step(session=session, build=session.get(Build, build_id))
    with sessions() as session:
        open_for_query = session.scalars(
            select(QuerySlot).where(
                QuerySlot.build_id == build_id,
                QuerySlot.state == SlotState.open,
                QuerySlot.anchor_id == query[0],
                QuerySlot.lo_id == query[1],
                QuerySlot.hi_id == query[2],
            )
        ).all()
    assert len(open_for_query) == 1


def test_a_build_too_large_to_start_within_the_request_leaves_its_first_step_to_the_worker(
    client, auth, sessions, labelled_project, monkeypatch
):
    """Folding 5 M answers into 20 trees over 50,000 items held the request for minutes;
    past the inline bounds the POST answers at once and the queued step asks the
    questions (here the bound is lowered to this study's 60 items x 2 trees)."""
    project_id, _ = labelled_project
    monkeypatch.setattr(service, "INLINE_STEP_QUERIES", 100)
    settings = {"n_trees": 2, "leaf_size": 2, "random_state": 3}
    started = client.post(f"/api/v1/projects/{project_id}/builds", headers=auth, json=settings)
    assert started.status_code == 201, started.text
    build_id = started.json()["id"]
    assert started.json()["progress"].get("queries_pending", 0) == 0
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(QuerySlot)) == 0
        assert session.scalar(select(Job.status).where(Job.project_id == project_id)) == "queued"
    Worker(sessions, upkeep=False).run(until_idle=True)
    shown = client.get(f"/api/v1/projects/{project_id}/builds/{build_id}", headers=auth).json()
    assert shown["progress"]["queries_pending"] == 2 * (60 - 2)  # each root: all but its pivots


def test_the_queue_holds_what_the_build_waits_for_after_steps_that_split_nothing(
    sessions, labelled_project
):
    """Steps between the half-minute comparisons of the whole queue write only the queries
    their answers were about. Whatever the answers (half a query's votes, a tie, a vote
    against a settled query, or enough to split a node), the open slots stay exactly what
    the build waits for."""
    project_id, ids = labelled_project
    rng = np.random.default_rng(3)
    with unit_of_work(sessions) as session:
        build_id = start(session, project_id, n_trees=3, answers_per_query=2, random_state=0).id
    settled: list = []
    for _ in range(12):
        with sessions() as session:
            build = session.get(Build, build_id)
            queries = service.pending_queries(session=session, build=build)
        if len(queries) == 0:
            break
        some = queries[rng.choice(len(queries), min(len(queries), 15), replace=False)]
        votes = [(a, p, q) for a, p, q in some]  # one vote each
        votes += [(a, q, p) for a, p, q in some[:3]]  # three ties
        votes += [(a, p, q) for a, p, q in some[3:8]]  # five settled
        settled += [tuple(row) for row in some[3:8]]
        votes += [(a, q, p) for a, p, q in settled[:2]]  # a vote against a settled query
        store_answers(sessions, project_id, votes)
        with unit_of_work(sessions) as session:
            service.step(session=session, build=session.get(Build, build_id))
        with sessions() as session:
            build = session.get(Build, build_id)
            builder = service._current_builder(session, build)
            pending, needed = builder.pending_queries(return_needed=True)
            asked = service.item_ids(build)[pending].tolist()
            expected = {
                (a, min(p, q), max(p, q)): n
                for (a, p, q), n in zip(asked, needed.tolist(), strict=True)
            }
            slots = session.execute(
                select(QuerySlot.anchor_id, QuerySlot.lo_id, QuerySlot.hi_id).where(
                    QuerySlot.build_id == build_id, QuerySlot.state == SlotState.open
                )
            ).all()
        held: dict = {}
        for row in slots:
            held[tuple(row)] = held.get(tuple(row), 0) + 1
        assert held == expected
