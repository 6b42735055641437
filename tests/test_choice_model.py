"""The choice model as a service (issue 57), on both databases: a study's odd-one-out
screens, uploaded as a lab has them, are learned as the choices the raters made beside
the plain triplets; the fit is the library's on the same choices, measured on held-out
screens near the planted model's own accuracy, and it serves each choice's probability
on a screen, distances and neighbours by its own likeness."""

from __future__ import annotations

import numpy as np
import pytest

from app.learn import ChoiceEmbedding, odd_one_out_choices, triplet_choices
from app.models import LearnedModel, Project
from app.training import runs
from app.worker.loop import Worker
from tests.support.models import API, create_model, get_model

ITEMS, DIMS, SCREENS, TRIPLETS = 36, 4, 1200, 150


def _softmax(scores: np.ndarray) -> np.ndarray:
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


@pytest.fixture
def study(client, auth, project):
    """Items k0…k35 with a planted sparse non-negative embedding; odd-one-out screens
    drawn from its softmax over the three pairs (a judgement file), and plain triplets
    (a triplet file). Returns the project id, the planted embedding, the screens and the
    planted model's own accuracy on them."""
    rng = np.random.default_rng(7)
    X = (rng.random((ITEMS, DIMS)) < 0.35) * rng.gamma(3.0, 1.0, (ITEMS, DIMS))
    X[np.arange(ITEMS), rng.integers(0, DIMS, ITEMS)] += 1.5  # every item on a dimension
    pid = project["id"]
    items = "key\n" + "".join(f"k{i}\n" for i in range(ITEMS))
    made = client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", items)}
    )
    assert made.status_code == 201, made.text
    shown = np.argsort(rng.random((SCREENS, ITEMS)), axis=1)[:, :3]
    i, j, k = shown.T
    likeness = np.stack([(X[j] * X[k]).sum(1), (X[i] * X[k]).sum(1), (X[i] * X[j]).sum(1)], 1)
    p = _softmax(likeness)
    drawn = (rng.random(SCREENS)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    odd = shown[np.arange(SCREENS), drawn]
    rows = "".join(
        f"odd_one_out,k{a},k{b},k{c},k{o}\n" for (a, b, c), o in zip(shown, odd, strict=True)
    )
    judged = client.post(
        f"{API}/projects/{pid}/judgements",
        headers=auth,
        files={"file": ("things.csv", "format,item1,item2,item3,pick1\n" + rows)},
    )
    assert judged.status_code == 201, judged.text
    anchors = np.argsort(rng.random((TRIPLETS, ITEMS)), axis=1)[:, :3]
    closer_first = (X[anchors[:, 0]] * X[anchors[:, 1]]).sum(1) >= (
        X[anchors[:, 0]] * X[anchors[:, 2]]
    ).sum(1)
    triplets = np.where(closer_first[:, None], anchors, anchors[:, [0, 2, 1]])
    body = "anchor,closer,farther\n" + "".join(f"k{a},k{b},k{c}\n" for a, b, c in triplets)
    sent = client.post(
        f"{API}/projects/{pid}/triplets", headers=auth, files={"file": ("t.csv", body)}
    )
    assert sent.status_code == 201, sent.text
    planted_accuracy = float(np.mean(p.argmax(axis=1) == drawn))
    return pid, X, (shown, odd, triplets), planted_accuracy


def _run_jobs(app):
    Worker(app.state.session_factory).run(until_idle=True)


def test_screens_are_learned_as_the_choices_made_and_served_as_the_library_fits_them(
    app, client, auth, study
):
    pid, X, (shown, odd, triplets), planted_accuracy = study
    model = create_model(
        client, auth, pid, name="things", kind="choice", params={"heldout_share": 0}
    )
    with app.state.session_factory() as session:
        stored = session.get(LearnedModel, model["id"])
        snap = runs.snapshot(session, session.get(Project, pid), stored)
    # Every screen whole, as one choice among its three pairs; the triplets as choices
    # of two. Positions are the keys' numbers (items in id order, uploaded in order).
    choices = snap.choices
    assert snap.screens_learned_whole == {"odd_one_out": SCREENS}
    assert len(choices) == SCREENS + TRIPLETS
    expected = odd_one_out_choices(shown, odd)
    assert (choices.pairs[:SCREENS, :3] == expected.pairs).all()
    assert (choices.pairs[SCREENS:, :2] == triplet_choices(triplets).pairs).all()
    assert (choices.pairs[SCREENS:, 2] == -1).all()
    # A screen's choice carries its judgement's number, as its two triplets do.
    assert len(np.unique(choices.judgement)) == SCREENS + TRIPLETS
    assert set(choices.judgement[:SCREENS]) == set(snap.groups[snap.groups > 0])

    _run_jobs(app)
    version = get_model(client, auth, pid, model["id"])["serving"]
    assert version["status"] == "ready", version
    metrics = version["metrics"]
    assert metrics["screens_learned_whole"] == {"odd_one_out": SCREENS}
    assert metrics["choices"] == SCREENS + TRIPLETS and "heldout_choice_accuracy" not in metrics
    # The sparsity, and with it the dimension, chosen on held-out screens: said on the
    # model's page as its version's message.
    selection = metrics["selection"]
    assert len(selection["candidates"]) == 7 and selection["why"] in version["message"]
    assert 1 <= metrics["n_components"] <= 64

    offline = ChoiceEmbedding(random_state=0).fit(snap.choices, n_items=ITEMS)
    served = client.get(f"{API}/projects/{pid}/models/{model['id']}/embedding", headers=auth)
    body = served.json()
    assert body["keys"] == [f"k{i}" for i in range(ITEMS)]
    assert np.allclose(body["coordinates"], offline.embedding_)
    assert body["dimension"] == offline.n_components_ == metrics["n_components"]


def test_held_out_screens_are_predicted_near_the_planted_models_own_accuracy(
    app, client, auth, study
):
    pid, X, _, planted_accuracy = study
    model = create_model(client, auth, pid, name="things", kind="choice")
    _run_jobs(app)
    version = get_model(client, auth, pid, model["id"])["serving"]
    metrics = version["metrics"]
    # A tenth of the screens (whole, with their triplets) held out.
    held = metrics["heldout_choices"]
    assert 0.08 * (SCREENS + TRIPLETS) < held < 0.12 * (SCREENS + TRIPLETS)
    assert version["heldout_count"] + version["answers_count"] == 2 * SCREENS + TRIPLETS
    # Chance is a third; the planted softmax itself gets `planted_accuracy` of all screens.
    assert metrics["heldout_choice_accuracy"] > planted_accuracy - 0.08
    assert metrics["heldout_choice_accuracy"] > 0.5
    # Guessing: log 3 on an odd-one-out, log 2 on a plain triplet.
    assert np.log(2) < metrics["chance_log_loss"] < np.log(3)
    assert 0 < metrics["heldout_log_loss"] < metrics["chance_log_loss"]
    assert "no better than guessing" not in version["message"]
    assert metrics["heldout_triplet_error"] < 0.3


def test_a_choice_model_gives_each_choices_probability_and_its_own_distances(
    app, client, auth, study
):
    pid = study[0]
    model = create_model(
        client, auth, pid, name="things", kind="choice", params={"heldout_share": 0}
    )
    tete = create_model(client, auth, pid, name="map", kind="tete", params={"max_iter": 50})
    _run_jobs(app)
    base = f"{API}/projects/{pid}/models/{model['id']}"
    E = np.array(client.get(f"{base}/embedding", headers=auth).json()["coordinates"])
    S = E @ E.T  # the model's likeness: the dot product of its sparse embedding

    screens = [
        {"format": "odd_one_out", "items": ["k0", "k1", "k2"]},
        {"format": "rank", "items": [f"k{i}" for i in range(4, 12)], "reference": "k3", "picks": 2},
        {"format": "triplet", "items": ["k1", "k2"], "reference": "k0"},
    ]
    answered = client.post(f"{base}/choices", headers=auth, json={"screens": screens})
    assert answered.status_code == 200, answered.text
    found = [screen["probabilities"] for screen in answered.json()["screens"]]
    # The odd one is chosen by choosing the other two as the likest pair.
    odd = _softmax(np.array([[S[1, 2], S[0, 2], S[0, 1]]]))[0]
    assert found[0] == pytest.approx({"k0": odd[0], "k1": odd[1], "k2": odd[2]})
    first = _softmax(S[3, 4:12][None])[0]
    assert found[1] == pytest.approx({f"k{i}": first[i - 4] for i in range(4, 12)})
    closer = _softmax(np.array([[S[0, 1], S[0, 2]]]))[0]
    assert found[2] == pytest.approx({"k1": closer[0], "k2": closer[1]})
    assert all(sum(p.values()) == pytest.approx(1) for p in found)

    # Distances rank each item's neighbours as the model chooses: likest first.
    distances = client.post(
        f"{base}/distances", headers=auth, json={"pairs": [["k0", "k1"], ["k1", "k0"]]}
    ).json()["distances"]
    offset = np.max(np.diag(S))
    assert distances == pytest.approx([offset - S[0, 1]] * 2)
    neighbors = client.get(f"{base}/neighbors?item=k5&k=4", headers=auth).json()["neighbors"]
    likest = [i for i in np.argsort(-S[5], kind="stable") if i != 5][:4]
    assert [row["key"] for row in neighbors] == [f"k{i}" for i in likest]
    assert all(row["distance"] >= 0 for row in neighbors)

    def refused(body, model_id=model["id"]):
        response = client.post(
            f"{API}/projects/{pid}/models/{model_id}/choices", headers=auth, json=body
        )
        assert 400 <= response.status_code < 500, response.text
        return response.status_code, str(response.json()["detail"])

    status, message = refused({"screens": [screens[0], {"format": "rank", "items": ["k1", "k2"]}]})
    assert status == 422 and "screens[1]" in message and "reference" in message
    status, message = refused(
        {"screens": [{"format": "odd_one_out", "items": ["k0", "k1", "nope"]}]}
    )
    assert status == 422 and "screens[0].items[2]" in message and "'nope'" in message
    status, message = refused({"screens": [{"format": "odd_one_out", "items": ["k0", "k1"]}]})
    assert status == 422 and "3 items" in message
    status, message = refused(
        {"screens": [{"format": "triplet", "items": ["k0", "k1"], "reference": "k0"}]}
    )
    assert status == 422 and "twice" in message
    status, _ = refused({"screens": [{"format": "sort", "items": ["k0", "k1"]}]})
    assert status == 422
    status, message = refused({"screens": screens[:1]}, model_id=tete["id"])
    assert status == 400 and "t-ETE model predicts no choices" in message


def test_rank_screens_of_two_shapes_are_learned_whole_each_choice_its_own_width(
    app, client, auth, project
):
    """ "2 of 6" and "1 of 4" rank screens beside an odd-one-out: each rank screen is one
    choice a pick among the items left, of its own width; the screens that showed an item
    since deleted went with it (app/items/removal.py), and nothing of them is learned."""
    pid = project["id"]
    items = "key\n" + "".join(f"k{i}\n" for i in range(12))
    made = client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", items)}
    )
    assert made.status_code == 201, made.text
    rows = (
        "format,reference,item1,item2,item3,item4,item5,item6,pick1,pick2\n"
        "rank,k0,k1,k2,k3,k4,k5,k7,k3,k1\n"
        "rank,k8,k1,k2,k3,k4,,,k2,\n"
        "odd_one_out,,k4,k5,k6,,,,k6,\n"
        "rank,k11,k1,k2,k3,k4,k5,k6,k5,k1\n"
    )
    sent = client.post(
        f"{API}/projects/{pid}/judgements", headers=auth, files={"file": ("j.csv", rows)}
    )
    assert sent.status_code == 201, sent.text
    gone = client.delete(f"{API}/projects/{pid}/items/k6", headers=auth)
    assert gone.status_code == 200, gone.text
    model = create_model(client, auth, pid, name="ranks", kind="choice")
    with app.state.session_factory() as session:
        snap = runs.snapshot(
            session, session.get(Project, pid), session.get(LearnedModel, model["id"])
        )
    choices = snap.choices
    # The first two screens (2 of 6: two choices, of 6 pairs then 5; 1 of 4: one); the
    # odd-one-out and the last rank screen showed k6.
    assert snap.screens_learned_whole == {"rank": 2}
    assert sorted(choices.n_alternatives.tolist()) == [4, 5, 6]
    position = {f"k{i}": i - (i > 6) for i in range(12) if i != 6}  # positions follow ids
    first = choices.pairs[choices.n_alternatives == 6][0]
    assert first[0].tolist() == [position["k0"], position["k3"]]
    second = choices.pairs[choices.n_alternatives == 5][0]
    assert second[0].tolist() == [position["k0"], position["k1"]]
    assert position["k3"] not in second[:5, 1]
    assert set(choices.judgement) == set(snap.groups[snap.groups > 0])


def test_the_kernel_form_serves_euclidean_distances_and_its_own_choices(app, client, auth, study):
    """t-STE's form (`"similarity": "kernel"`): the distances are the embedding's own, and
    a screen's choices the Student-t kernel's shares."""
    pid = study[0]
    model = create_model(
        client,
        auth,
        pid,
        name="kernel",
        kind="choice",
        params={"similarity": "kernel", "n_components": 2, "heldout_share": 0},
    )
    _run_jobs(app)
    base = f"{API}/projects/{pid}/models/{model['id']}"
    version = get_model(client, auth, pid, model["id"])["serving"]
    assert version["metrics"]["similarity"] == "kernel" and "selection" not in version["metrics"]
    E = np.array(client.get(f"{base}/embedding", headers=auth).json()["coordinates"])
    assert E.shape == (ITEMS, 2)
    distances = client.post(
        f"{base}/distances", headers=auth, json={"pairs": [["k0", "k1"]]}
    ).json()["distances"]
    assert distances == pytest.approx([np.linalg.norm(E[0] - E[1])])
    found = client.post(
        f"{base}/choices",
        headers=auth,
        json={"screens": [{"format": "triplet", "items": ["k1", "k2"], "reference": "k0"}]},
    ).json()["screens"][0]["probabilities"]
    # Student-t with alpha = max(d - 1, 1) = 1 degree of freedom: (1 + d²)^-1.
    kernel = [1 / (1 + np.sum((E[0] - E[i]) ** 2)) for i in (1, 2)]
    assert found == pytest.approx({"k1": kernel[0] / sum(kernel), "k2": kernel[1] / sum(kernel)})


def test_a_fit_no_better_than_guessing_says_so(app, client, auth, project):
    """Odd-one-outs answered at random: nothing to learn. The held-out log loss is set
    beside guessing's (the log of three), and the version says it is no better."""
    pid = project["id"]
    rng = np.random.default_rng(11)
    items = "key\n" + "".join(f"k{i}\n" for i in range(30))
    made = client.post(
        f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", items)}
    )
    assert made.status_code == 201, made.text
    shown = np.array([rng.choice(30, 3, replace=False) for _ in range(400)])
    odd = shown[np.arange(400), rng.integers(0, 3, 400)]
    rows = "".join(f"k{a},k{b},k{c},k{o}\n" for (a, b, c), o in zip(shown, odd, strict=True))
    sent = client.post(
        f"{API}/projects/{pid}/judgements",
        headers=auth,
        files={"file": ("noise.csv", "item1,item2,item3,pick1\n" + rows)},
    )
    assert sent.status_code == 201, sent.text
    model = create_model(client, auth, pid, name="noise", kind="choice", params={"n_components": 8})
    _run_jobs(app)
    version = get_model(client, auth, pid, model["id"])["serving"]
    metrics = version["metrics"]
    assert metrics["chance_log_loss"] == pytest.approx(np.log(3))
    assert metrics["heldout_log_loss"] >= metrics["chance_log_loss"]
    assert "no better than guessing" in version["message"]


def test_a_fit_whose_chosen_candidate_did_not_settle_says_where_it_stopped(
    app, client, auth, study
):
    """With l1 "auto", the version's `converged` is the chosen candidate's fit's (a third
    of max_iter; the refit from it is a short step by design), and the message says so."""
    pid, *_ = study
    model = create_model(
        client, auth, pid, name="hasty", kind="choice", params={"n_components": 4, "max_iter": 6}
    )
    _run_jobs(app)
    version = get_model(client, auth, pid, model["id"])["serving"]
    assert version["converged"] is False
    assert (
        "not converged: the chosen candidate's fit stopped at max_iter / 3 (2 L-BFGS "
        "iterations); raise max_iter" in version["message"]
    ), version["message"]
