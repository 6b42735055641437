"""Proposals on both databases: after a fit the worker queues the samplers' questions,
mixed by the project's shares; raters are served them after CompRF's needs and the
random share; a refit or a change of the shares replaces the stale ones."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sklearn.datasets import make_blobs
from sqlalchemy import select, update

from app import learn
from app.adaptive import jobs as adaptive_jobs
from app.adaptive.proposals import (
    BATCH,
    KEY_BITS,
    PURPOSES,
    RATED_WITHIN,
    REFILL_BELOW,
)
from app.core import caches
from app.core.db import unit_of_work
from app.learn import FeatureOracle, random_triplets
from app.models import (
    Assignment,
    Job,
    ModelVersion,
    Purpose,
    QuerySlot,
    Rater,
    SlotState,
    Triplet,
)
from app.models._types import utcnow
from app.training.service import load_fitted
from app.worker import loop, queue
from app.worker.loop import Worker
from tests.support.links import open_link
from tests.support.rating import answer, join_answered

API = "/api/v1"


def _someone_rates(client, auth, project_id) -> dict[str, str]:
    """A rater joins the project's public link: its rater token header."""
    slug = open_link(client, auth, project_id)["public_slug"]
    joined = client.post(f"{API}/rate/{slug}/raters", json={})
    assert joined.status_code == 201, joined.text
    return {"X-Rater-Token": joined.json()["rater_token"]}


@pytest.fixture
def labelled_project(client, auth, project):
    """90 items in 3 blobs: 60 labelled, 30 whose label is wanted (15 test, 15
    unlabelled); 3,000 answers, and a rater who just joined."""
    X, y = make_blobs(n_samples=90, centers=3, n_features=4, random_state=3)
    lines = ["key,label,split"]
    for i in range(90):
        label, split = (
            (y[i], "train") if i < 60 else (y[i], "test") if i < 75 else ("", "unlabelled")
        )
        lines.append(f"b{i},{label},{split}")
    response = client.post(
        f"{API}/projects/{project['id']}/items",
        headers=auth,
        files={"file": ("items.csv", "\n".join(lines))},
    )
    assert response.status_code == 201, response.text
    answers = random_triplets(90, 3000, FeatureOracle(X), random_state=0)
    body = "anchor,closer,farther\n" + "\n".join(f"b{a},b{c},b{f}" for a, c, f in answers)
    response = client.post(
        f"{API}/projects/{project['id']}/triplets",
        headers=auth,
        files={"file": ("answers.csv", body)},
    )
    assert response.status_code == 201, response.text
    _someone_rates(client, auth, project["id"])
    return project["id"], X, y


def _fit(app, client, auth, project_id):
    response = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={
            "name": "map",
            "kind": "tete",
            "params": {"t": 1.0, "n_components": 2},
            "auto_refit": False,
        },
    )
    assert response.status_code == 201, response.text
    Worker(app.state.session_factory).run(until_idle=True)
    return response.json()["id"]


def _boosting_model(client, auth, project_id, train: bool) -> None:
    """A TripletBoost model that refits only when asked; `train`: its first fit queued."""
    response = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={"name": "boost", "kind": "tripletboost", "train": train, "auto_refit": False},
    )
    assert response.status_code == 201, response.text


def _open_proposals(app, project_id):
    with app.state.session_factory() as session:
        return session.scalars(
            select(QuerySlot)
            .where(
                QuerySlot.project_id == project_id,
                QuerySlot.priority == int(Purpose.proposal),
                QuerySlot.state == SlotState.open,
            )
            .order_by(QuerySlot.id)
        ).all()


def _proposals_only_rater(client, auth, project_id):
    """No random share and no checks: a rater who answered their first comparison (a
    random one) and is served from the queue from now on: (slug, token header, state)."""
    settings = client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"random_share": 0, "attention_rate": 0},
    )
    assert settings.status_code == 200, settings.text
    slug = open_link(client, auth, project_id)["public_slug"]
    return slug, *join_answered(client, slug)


def _purpose(slot) -> str:
    return PURPOSES[(slot.query_key >> KEY_BITS) - 1]


def test_a_fit_queues_proposals_that_raters_get_after_the_random_share(
    app, client, auth, labelled_project, monkeypatch
):
    project_id, _, y = labelled_project
    caches.current().drop("adaptive.refresher")  # a worker that refreshed nothing yet
    sessions = app.state.session_factory
    adaptive_jobs.refresh_proposals(sessions)
    assert _open_proposals(app, project_id) == []  # no model fitted yet: nothing to ask

    _fit(app, client, auth, project_id)
    adaptive_jobs.refresh_proposals(sessions)
    slots = _open_proposals(app, project_id)
    assert len(slots) == BATCH
    purposes = [_purpose(slot) for slot in slots]
    # Automatic shares: labels are wanted (2 parts), the embedding (1 part); every item
    # has answers, so none needs placing. The queue mixes them all along.
    labelling = round(BATCH * 2 / 3)
    assert purposes.count("labelling") == labelling
    assert purposes.count("embedding") == BATCH - labelling
    assert 15 <= purposes[:30].count("labelling") <= 25
    keys = _keys_by_id(app, project_id)
    wanted = {f"b{i}" for i in range(60, 90)}
    labelling_anchors = [keys[s.anchor_id] for s in slots if _purpose(s) == "labelling"]
    assert sum(anchor in wanted for anchor in labelling_anchors) >= 0.6 * len(labelling_anchors)
    for slot in slots:
        if _purpose(slot) == "labelling":  # asked between two classes
            assert y[int(keys[slot.lo_id][1:])] != y[int(keys[slot.hi_id][1:])]

    # Nothing stale, plenty left: the next rounds change nothing.
    adaptive_jobs.refresh_proposals(sessions)
    assert [slot.id for slot in _open_proposals(app, project_id)] == [s.id for s in slots]

    # A rater with no random share and no checks gets the queue's first proposal.
    slug, token, state = _proposals_only_rater(client, auth, project_id)
    first = slots[0]
    with sessions() as session:
        served = session.get(Assignment, state["comparison"]["query_id"])
        assert served.purpose == int(Purpose.proposal) and served.slot_id == first.id
    before = client.get(f"{API}/projects/{project_id}", headers=auth).json()
    answered = client.post(
        f"{API}/rate/{slug}/answers",
        headers=token,
        json={"query_id": served.id, "choice": "left"},
    )
    assert answered.status_code == 200, answered.text
    with sessions() as session:
        assert session.get(QuerySlot, first.id).state == SlotState.answered
        # The answer served next comes from the queue too (the one call on PostgreSQL).
        following = session.get(Assignment, answered.json()["comparison"]["query_id"])
        assert following.purpose == int(Purpose.proposal)
    after = client.get(f"{API}/projects/{project_id}", headers=auth).json()
    assert after["triplet_count"] == before["triplet_count"] + 1

    # New shares replace the open proposals (the leased one stays with its rater).
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"embedding_share": 1.0},
    )
    adaptive_jobs.refresh_proposals(sessions)
    fresh = _open_proposals(app, project_id)
    leased = [slot for slot in fresh if slot.lease_rater_id is not None]
    assert len(leased) == 1 and leased[0].id == following.slot_id
    assert {_purpose(slot) for slot in fresh if slot not in leased} == {"embedding"}
    assert len(fresh) == BATCH + 1


def test_proposals_wait_for_someone_to_rate(app, client, auth, labelled_project, monkeypatch):
    """A refresh reads every answer: the worker makes proposals only for projects a rater
    joined or answered in the last ten minutes, and starts as soon as one does."""
    project_id, _, _ = labelled_project
    caches.current().drop("adaptive.refresher")  # a worker that refreshed nothing yet
    sessions = app.state.session_factory
    with sessions() as session:  # the rater who joined did so eleven minutes ago
        session.execute(
            update(Rater)
            .where(Rater.project_id == project_id)
            .values(last_seen_at=utcnow() - RATED_WITHIN - timedelta(minutes=1))
        )
        session.commit()
    _fit(app, client, auth, project_id)
    adaptive_jobs.refresh_proposals(sessions)
    assert _open_proposals(app, project_id) == []
    adaptive_jobs.refresh_proposals(sessions)
    assert _open_proposals(app, project_id) == []

    _someone_rates(client, auth, project_id)
    adaptive_jobs.refresh_proposals(sessions)
    assert len(_open_proposals(app, project_id)) == BATCH


def test_a_refit_replaces_stale_proposals_and_new_items_get_placed(
    app, client, auth, labelled_project, monkeypatch
):
    project_id, _, _ = labelled_project
    caches.current().drop("adaptive.refresher")  # a worker that refreshed nothing yet
    sessions = app.state.session_factory
    model_id = _fit(app, client, auth, project_id)
    adaptive_jobs.refresh_proposals(sessions)
    first = {slot.id for slot in _open_proposals(app, project_id)}
    # Ten new items, unknown to the embedding until its next fit.
    lines = ["key,label,split"] + [f"n{i},,unlabelled" for i in range(10)]
    response = client.post(
        f"{API}/projects/{project_id}/items",
        headers=auth,
        files={"file": ("new.csv", "\n".join(lines))},
    )
    assert response.status_code == 201, response.text
    train = client.post(f"{API}/projects/{project_id}/models/{model_id}/train", headers=auth)
    assert train.status_code == 202, train.text
    Worker(sessions).run(until_idle=True)
    adaptive_jobs.refresh_proposals(sessions)
    second = _open_proposals(app, project_id)
    assert first.isdisjoint(slot.id for slot in second)
    keys = _keys_by_id(app, project_id)
    placing = [slot for slot in second if _purpose(slot) == "placement"]
    assert placing and all(keys[slot.anchor_id].startswith("n") for slot in placing)
    assert {keys[slot.anchor_id] for slot in placing} == {f"n{i}" for i in range(10)}
    with sessions() as session:
        withdrawn = session.scalars(
            select(QuerySlot.state).where(QuerySlot.id.in_(list(first)))
        ).all()
    assert set(withdrawn) == {SlotState.withdrawn}


def test_raters_keep_getting_proposals_while_the_samplers_run(
    app, client, auth, labelled_project, monkeypatch
):
    """A refresh makes its new proposals before it touches the old ones: a rater who
    answers meanwhile is served one of the open proposals at once. (It used to withdraw
    them first and hold them while the samplers ran: on PostgreSQL the rater skipped the
    held rows and fell back to a random question, on SQLite waited for the write lock.)"""
    project_id, _, _ = labelled_project
    caches.current().drop("adaptive.refresher")
    sessions = app.state.session_factory
    _fit(app, client, auth, project_id)
    adaptive_jobs.refresh_proposals(sessions)
    old = {slot.id for slot in _open_proposals(app, project_id)}
    assert len(old) == BATCH
    slug, rater, state = _proposals_only_rater(client, auth, project_id)
    adaptive_jobs.refresh_proposals(sessions)  # the settings' change, taken in
    old = {slot.id for slot in _open_proposals(app, project_id)}

    meanwhile = []
    propose = learn.EmbeddingSampler.propose

    def answering_meanwhile(self, count, sampler_state):
        if not meanwhile:  # a rater answers while the samplers run
            # (in this thread: an answer that waited for the refresh's lock or rows
            # would wait for ever, and fail at the database's busy timeout instead)
            meanwhile.append(answer(client, slug, rater, state["comparison"]["query_id"]))
        return propose(self, count, sampler_state)

    monkeypatch.setattr(learn.EmbeddingSampler, "propose", answering_meanwhile)
    client.patch(f"{API}/projects/{project_id}/rating", headers=auth, json={"embedding_share": 1.0})
    adaptive_jobs.refresh_proposals(sessions)

    (response,) = meanwhile
    assert response.status_code == 200, response.text
    with sessions() as session:
        served = session.get(Assignment, response.json()["comparison"]["query_id"])
    assert served.purpose == int(Purpose.proposal) and served.slot_id in old
    fresh = _open_proposals(app, project_id)
    assert {_purpose(slot) for slot in fresh if slot.lease_rater_id is None} == {"embedding"}


def test_proposals_held_by_raters_who_walked_away_do_not_count_as_left(
    app, client, auth, labelled_project, monkeypatch
):
    """A lease keeps its slot until it expires (a closed tab, a bot on the public link):
    the queue is topped up when the slots free to serve run low, not all open ones."""
    project_id, _, _ = labelled_project
    caches.current().drop("adaptive.refresher")  # a worker that refreshed nothing yet
    sessions = app.state.session_factory
    _fit(app, client, auth, project_id)
    adaptive_jobs.refresh_proposals(sessions)
    slots = _open_proposals(app, project_id)
    slug = open_link(client, auth, project_id)["public_slug"]
    assert client.post(f"{API}/rate/{slug}/raters", json={}).status_code == 201
    with sessions() as session:
        rater_id = session.scalar(select(Rater.id).order_by(Rater.id.desc()).limit(1))
        held = [slot.id for slot in slots[: BATCH - REFILL_BELOW + 1]]
        session.execute(
            update(QuerySlot)
            .where(QuerySlot.id.in_(held))
            .values(lease_rater_id=rater_id, lease_expires_at=utcnow() + timedelta(minutes=10))
        )
        session.commit()
    adaptive_jobs.refresh_proposals(sessions)
    now_open = _open_proposals(app, project_id)
    assert len(now_open) == len(held) + BATCH  # the held ones stay with their raters
    assert set(held) <= {slot.id for slot in now_open}


def test_held_out_errors_are_measured_on_answers_to_random_questions_only(
    app, client, auth, labelled_project, monkeypatch
):
    """An answer to a proposal is marked adaptive (the Python scheduler on SQLite, the
    answer function on PostgreSQL), a random one is not; a t-ETE fit holds out only
    unmarked answers and says so."""
    project_id, _, _ = labelled_project
    caches.current().drop("adaptive.refresher")  # a worker that refreshed nothing yet
    sessions = app.state.session_factory
    model_id = _fit(app, client, auth, project_id)
    adaptive_jobs.refresh_proposals(sessions)
    marked = {}
    for share in (1.0, 0.0):  # all random, then all from the queue
        settings = client.patch(
            f"{API}/projects/{project_id}/rating",
            headers=auth,
            # No repeated random questions: a repeat is marked alike (tests/test_noise_ceiling).
            json={"random_share": share, "attention_rate": 0, "repeat_share": 0},
        )
        assert settings.status_code == 200, settings.text
        slug = open_link(client, auth, project_id)["public_slug"]
        token, state = join_answered(client, slug)  # a rater's first query is a random one
        query = state["comparison"]
        response = client.post(
            f"{API}/rate/{slug}/answers",
            headers=token,
            json={"query_id": query["query_id"], "choice": "left"},
        )
        assert response.status_code == 200, response.text
        with sessions() as session:
            purpose = session.get(Assignment, query["query_id"]).purpose
            marked[Purpose(purpose).name] = session.scalar(
                select(Triplet.adaptive).where(Triplet.query_id == query["query_id"])
            )
    assert marked == {"random": False, "proposal": True}

    # A thousand earlier answers marked as if a build had asked them.
    with sessions() as session:
        first = session.scalars(
            select(Triplet.id).where(Triplet.project_id == project_id).order_by(Triplet.id)
        ).all()[:1000]
        session.execute(update(Triplet).where(Triplet.id.in_(first)).values(adaptive=True))
        session.commit()
    train = client.post(f"{API}/projects/{project_id}/models/{model_id}/train", headers=auth)
    assert train.status_code == 202, train.text
    Worker(sessions).run(until_idle=True)
    version = client.get(f"{API}/projects/{project_id}/models/{model_id}", headers=auth).json()[
        "serving"
    ]
    # 3,000 uploaded, and 4 from the two raters: a random first answer each, then one
    # random and one proposal.
    assert version["metrics"]["adaptive_answers"] == 1001
    assert version["heldout_count"] == round(0.1 * (3004 - 1001))
    assert (
        "held-out errors on the 2003 answers to uniformly random questions" in (version["message"])
    )
    with sessions() as session:
        version_id = session.scalar(
            select(ModelVersion.id).where(
                ModelVersion.model_id == model_id, ModelVersion.number == version["number"]
            )
        )
        held = load_fitted(session, version_id).heldout_answer_ids
        adaptive = set(
            session.scalars(
                select(Triplet.id).where(Triplet.project_id == project_id, Triplet.adaptive)
            )
        )
    assert len(held) and adaptive.isdisjoint(held.tolist())


def test_with_boosted_classifiers_the_labelling_questions_grow_comparison_trees(
    app, client, auth, labelled_project, monkeypatch
):
    """TripletBoost learns a reference pair only from labelled items that answered it:
    each pair proposed is a tree node's two pivots of different classes, asked of every
    labelled item and of every wanted item, the wanted items' questions first."""
    project_id, _, y = labelled_project
    caches.current().drop("adaptive.refresher")  # a worker that refreshed nothing yet
    sessions = app.state.session_factory
    _boosting_model(client, auth, project_id, train=True)
    Worker(sessions).run(until_idle=True)
    adaptive_jobs.refresh_proposals(sessions)
    slots = _open_proposals(app, project_id)
    assert slots and {_purpose(slot) for slot in slots} == {"labelling"}
    keys = _keys_by_id(app, project_id)
    label = {item_id: y[int(key[1:])] for item_id, key in keys.items()}
    wanted = {item_id for item_id, key in keys.items() if int(key[1:]) >= 60}
    labelled = set(keys) - wanted
    pairs = {}
    for slot in slots:
        pairs.setdefault((slot.lo_id, slot.hi_id), []).append(slot.anchor_id)
    with sessions() as session:
        answered = {
            (anchor, min(closer, farther), max(closer, farther))
            for anchor, closer, farther in session.execute(
                select(Triplet.anchor_id, Triplet.closer_id, Triplet.farther_id).where(
                    Triplet.project_id == project_id
                )
            )
        }
    # Nothing answered yet about the trees: a batch of 1,000 holds the roots of several
    # trees, each asked of every wanted item and every labelled item but its pivots
    # (less what the random answers already asked); the batch ends within the last
    # tree's labelled items.
    assert len(pairs) >= 5
    for number, (lo, hi) in enumerate(pairs):
        assert {lo, hi} <= labelled and label[lo] != label[hi]
        expected = {x for x in keys if x not in (lo, hi) and (x, lo, hi) not in answered}
        assert set(pairs[lo, hi]) & wanted == expected & wanted
        assert len(pairs[lo, hi]) == len(set(pairs[lo, hi]))
        if number < len(pairs) - 1:
            assert set(pairs[lo, hi]) == expected
    # The wanted items' questions first: they are what a prediction reads.
    is_wanted = [slot.anchor_id in wanted for slot in slots]
    riders = sum(is_wanted)
    assert riders >= 5 * 25 and all(is_wanted[:riders]) and not any(is_wanted[riders:])


def _keys_by_id(app, project_id):
    from app.models import Item

    with app.state.session_factory() as session:
        return dict(
            session.execute(select(Item.id, Item.key).where(Item.project_id == project_id)).all()
        )


def test_a_crowd_that_drains_the_proposals_during_a_long_fit_gets_more_before_it_ends(
    app, client, auth, labelled_project, monkeypatch
):
    """The worker tops the proposals up beside the job in hand: a crowd of hundreds a
    second drains a batch in seconds, and a fit may take minutes."""
    project_id, _, _ = labelled_project
    caches.current().drop("adaptive.refresher")  # a worker that refreshed nothing yet
    sessions = app.state.session_factory
    _fit(app, client, auth, project_id)
    adaptive_jobs.refresh_proposals(sessions)
    with sessions() as session:  # the crowd took them all
        session.execute(
            update(QuerySlot)
            .where(QuerySlot.project_id == project_id, QuerySlot.priority == int(Purpose.proposal))
            .values(state=SlotState.answered)
        )
        session.commit()

    def long_fit(context):
        for _ in range(100):
            if _open_proposals(app, project_id):
                return {"proposals_during_the_job": True}
            context.stopping.wait(0.1)
        return {"proposals_during_the_job": False}

    monkeypatch.setitem(loop.HANDLERS, "long_fit", long_fit)
    with unit_of_work(sessions) as session:
        job_id = queue.enqueue(session=session, kind="long_fit").id
    Worker(sessions, poll_seconds=0.2).run(until_idle=True)
    with sessions() as session:
        assert session.get(Job, job_id).result == {"proposals_during_the_job": True}
    assert len(_open_proposals(app, project_id)) == BATCH


def test_a_tripletboost_model_gets_its_questions_before_its_first_fit(
    app, client, auth, labelled_project
):
    """Its questions grow comparison trees from the answers alone: a crowd is asked them
    from its first answers on, not only once the first fit is done."""
    project_id, _, _ = labelled_project
    caches.current().drop("adaptive.refresher")  # a worker that refreshed nothing yet
    sessions = app.state.session_factory
    _boosting_model(client, auth, project_id, train=False)
    adaptive_jobs.refresh_proposals(sessions)
    slots = _open_proposals(app, project_id)
    assert len(slots) == BATCH and {_purpose(slot) for slot in slots} == {"labelling"}
    with sessions() as session:
        assert session.scalar(select(ModelVersion.id)) is None  # nothing was fitted
    keys = _keys_by_id(app, project_id)
    assert int(keys[slots[0].anchor_id][1:]) >= 60  # a wanted item's question first


def test_several_workers_refresh_the_proposals_once_per_fit_and_settings_change(
    app, client, auth, labelled_project
):
    """Each worker process remembers what it refreshed; docker-compose runs two (the
    worker and the trainer), and each swapped the proposals again after every fit and
    every change of the settings. The database now says whether they are stale, and a
    claim keeps two workers from refreshing a project at once."""
    from app.core.caches import Caches, using
    from app.core.claims import try_claim

    project_id, _, _ = labelled_project
    sessions = app.state.session_factory
    first, second = Caches(), Caches()

    def refresh_on(worker: Caches) -> set[int]:
        with using(worker):
            adaptive_jobs.refresh_proposals(sessions)
        return {slot.id for slot in _open_proposals(app, project_id)}

    def refit(model_id: int) -> None:
        train = client.post(f"{API}/projects/{project_id}/models/{model_id}/train", headers=auth)
        assert train.status_code == 202, train.text
        Worker(sessions, upkeep=False).run(until_idle=True)

    model_id = _fit(app, client, auth, project_id)
    made = refresh_on(second)
    assert len(made) == BATCH and refresh_on(first) == made
    refit(model_id)
    remade = refresh_on(first)
    assert remade.isdisjoint(made)
    assert refresh_on(second) == remade  # the second had refreshed the fit before

    client.patch(f"{API}/projects/{project_id}/rating", headers=auth, json={"embedding_share": 1})
    again = refresh_on(second)
    assert again.isdisjoint(remade)
    assert refresh_on(first) == again

    refit(model_id)
    claim = try_claim(sessions.kw["bind"], adaptive_jobs.REFRESH_CLAIMS, project_id)
    assert claim is not None
    with claim:  # another worker refreshing the project now
        assert refresh_on(first) == again
    assert refresh_on(first).isdisjoint(again)
