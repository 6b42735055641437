"""Models on both databases: fit in the worker, refit as answers grow, serve predictions,
embeddings, distances and neighbours over REST, with the same figures as the library run
offline on the same answers."""

from __future__ import annotations

import csv
import io
import pickle
import zlib
from datetime import timedelta

import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier
from sqlalchemy import select

from app.core.db import unit_of_work
from app.learn import TETE, FeatureOracle, TETESearch, TripletBoost, random_triplets
from app.learn.tete import NAMED_LOSSES
from app.models import Job, JobStatus, ModelKind, ModelVersion
from app.training import kinds
from app.training.fitted import Fitted
from app.training.jobs import refit_check
from app.training.kinds import checked_params
from app.training.schemas import LOSS_NAMES
from app.worker import queue
from app.worker.loop import Worker
from tests.support.models import (
    API,
    N_TEST,
    N_TRAIN,
    create_model,
    get_model,
    model_blobs,
    upload_blob_items,
    upload_triplets,
)
from tests.support.models import blob_project as blob_project_of


@pytest.fixture
def blobs():
    return model_blobs()


@pytest.fixture
def blob_project(client, auth, project, blobs):
    return blob_project_of(client, auth, project["id"], blobs)


def _run_jobs(app):
    Worker(app.state.session_factory).run(until_idle=True)


def _predict(client, auth, project_id, model_id, **body):
    return client.post(
        f"{API}/projects/{project_id}/models/{model_id}/predict", headers=auth, json=body
    )


def test_tete_fits_in_the_worker_and_serves_the_offline_embedding(
    app, client, auth, blob_project, blobs
):
    X, y, keys = blobs
    project_id, triplets = blob_project
    model = create_model(
        client, auth, project_id, name="tete-auto", kind="tete", params={"max_iter": 300}
    )
    assert model["latest"]["status"] == "queued" and model["serving"] is None
    not_ready = _predict(client, auth, project_id, model["id"], items=["b80"])
    assert not_ready.status_code == 409
    assert not_ready.json()["detail"]["status"] == "queued"
    assert "no ready version" in not_ready.json()["detail"]["message"]

    _run_jobs(app)
    model = get_model(client, auth, project_id, model["id"])
    version = model["serving"]
    assert version["number"] == 1 and version["status"] == "ready" and version["progress"] == 1
    # The dimension and loss are chosen by 3-fold cross-validation (the first fold alone
    # where it leaves one candidate), every loss at each dimension from 1 up while a
    # dimension lowers the error, and the embedding then fits every answer: the
    # cross-validated error is the held-out one.
    assert version["answers_count"] == 3000 and version["heldout_count"] == 0
    selection = version["metrics"]["selection"]
    tried = [(c["n_components"], c["loss"]) for c in selection["candidates"]]
    dims = sorted({d for d, _ in tried})
    assert dims == [1, 2, 3, 5, 8, 12, 16, 24, 32, 48, 64][: len(dims)] and len(dims) >= 3
    for d in dims:  # t-STE(d-1) is t-STE below 3-D: not tried twice
        thinner = ["t-STE(d-1)"] if d >= 3 else []
        assert [loss for d_, loss in tried if d_ == d] == [
            "t-STE",
            "t-ETE",
            "t=1.5",
            "STE",
            "SOE",
            *thinner,
        ]
    assert selection["chosen"]["n_components"] == version["metrics"]["n_components"] in dims
    assert selection["chosen"]["loss"] == version["metrics"]["loss"]
    assert selection["folds"] == 3 and selection["folds_run"] in (1, 3)
    # One standard error: the smallest dimension within the lowest error's spread over
    # the folds (or 0.002) of it, at its own lowest error.
    complete = [c for c in selection["candidates"] if c["folds"] == selection["folds_run"]]
    lowest = min(complete, key=lambda c: c["heldout_triplet_error"])
    bar = lowest["heldout_triplet_error"] + max(
        lowest["std"] / np.sqrt(selection["folds_run"]), 0.002
    )
    smallest = min(c["n_components"] for c in complete if c["heldout_triplet_error"] <= bar)
    best = min(
        (c for c in complete if c["n_components"] == smallest),
        key=lambda c: c["heldout_triplet_error"],
    )
    assert (best["n_components"], best["loss"]) == (
        version["metrics"]["n_components"],
        version["metrics"]["loss"],
    )
    # Each fold fits two thirds of 3,000 noiseless answers about 90 points.
    assert version["metrics"]["heldout_triplet_error"] == best["heldout_triplet_error"] < 0.12
    assert selection["why"] in version["message"]
    assert version["metrics"]["cv"]["accuracy"] > 0.9

    # Offline: the library on the same answers, with the same seed.
    offline = TETESearch(TETE(max_iter=300, random_state=0))
    offline.fit(triplets, n_items=len(X))
    assert offline.selection_ == selection["why"]
    served = client.get(
        f"{API}/projects/{project_id}/models/{model['id']}/embedding", headers=auth
    ).json()
    dimension = offline.n_components_
    assert served["keys"] == keys and served["dimension"] == dimension and served["version"] == 1
    assert np.allclose(served["coordinates"], offline.embedding_)

    unlabelled = keys[N_TRAIN + N_TEST :]
    response = _predict(client, auth, project_id, model["id"], items=unlabelled)
    assert response.status_code == 200, response.text
    body = response.json()
    knn = KNeighborsClassifier(5).fit(offline.embedding_[:N_TRAIN], y[:N_TRAIN].astype(str))
    expected = knn.predict(offline.embedding_[N_TRAIN + N_TEST :])
    assert [row["label"] for row in body["predictions"]] == list(expected)
    assert np.mean(expected == y[N_TRAIN + N_TEST :].astype(str)) > 0.9
    first = body["predictions"][0]
    assert first["known"] and abs(sum(first["probabilities"].values()) - 1) < 1e-9

    csv_body = client.get(
        f"{API}/projects/{project_id}/models/{model['id']}/embedding?format=csv", headers=auth
    )
    assert csv_body.headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(csv_body.text)))
    columns = [f"dim_{axis}" for axis in range(dimension)]
    assert rows[0] == ["key", *columns, "answered"] and len(rows) == len(X) + 1
    assert np.allclose([float(v) for v in rows[1][1 : 1 + dimension]], offline.embedding_[0])

    distances = client.post(
        f"{API}/projects/{project_id}/models/{model['id']}/distances",
        headers=auth,
        json={"pairs": [["b0", "b1"], ["b1", "b0"], ["b2", "b2"]]},
    ).json()["distances"]
    E = offline.embedding_
    assert distances[0] == pytest.approx(np.linalg.norm(E[0] - E[1]))
    assert distances[0] == distances[1] and distances[2] == 0

    neighbors = client.get(
        f"{API}/projects/{project_id}/models/{model['id']}/neighbors?item=b0&k=5", headers=auth
    ).json()["neighbors"]
    order = np.argsort(np.linalg.norm(E - E[0], axis=1))[1:6]
    assert [row["key"] for row in neighbors] == [keys[i] for i in order]

    # A new item near b0, answered by its features: placed in b0's cluster, labelled so.
    placed = _place_near_b0(client, auth, project_id, model["id"], X, keys).json()
    placed = placed["predictions"][0]
    assert placed["key"] == "stranger" and not placed["known"]
    assert placed["label"] == str(y[0]) and len(placed["coordinates"]) == dimension


def test_a_version_stored_before_the_artifact_envelope_still_serves_and_warm_starts(
    app, client, auth, blob_project, blobs
):
    """Artifacts were once the whole pickle compressed; now its arrays of floats follow
    it uncompressed. A version a researcher fitted before keeps serving the same
    embedding, places new items, and starts its model's next fit."""
    X, _, keys = blobs
    project_id, _ = blob_project
    model = create_model(
        client, auth, project_id, name="kept", kind="tete", params={"max_iter": 200, "t": 1}
    )
    _run_jobs(app)
    with unit_of_work(app.state.session_factory) as session:
        version = session.scalars(
            select(ModelVersion).where(ModelVersion.model_id == model["id"])
        ).one()
        fitted = Fitted.loads(version.artifact)
        assert version.artifact.startswith(b"CLOSER-ARTIFACT")
        # Loaded arrays are numpy's own to change, aligned as the learners' kernels want.
        assert fitted.coordinates.flags.aligned and fitted.coordinates.flags.writeable
        version.artifact = zlib.compress(pickle.dumps(fitted, pickle.HIGHEST_PROTOCOL), 1)

    base = f"{API}/projects/{project_id}/models/{model['id']}"
    served = client.get(f"{base}/embedding", headers=auth).json()
    assert served["version"] == 1 and served["keys"] == keys
    assert np.array_equal(served["coordinates"], fitted.coordinates)
    placed = _place_near_b0(client, auth, project_id, model["id"], X, keys)
    assert placed.status_code == 200, placed.text

    refit = client.post(f"{base}/train", headers=auth)
    assert refit.status_code == 202
    _run_jobs(app)
    second = get_model(client, auth, project_id, model["id"])["serving"]
    assert second["number"] == 2 and "warm start" in second["message"]


def test_a_failed_first_request_leaves_the_served_model_working(app, client, auth, blob_project):
    """The request that loads a version into the process's cache fails (an unknown item):
    the cached entry must outlive that request's session, so every later call works."""
    project_id, _ = blob_project
    model = create_model(
        client, auth, project_id, name="tete", kind="tete", params={"max_iter": 50}
    )
    _run_jobs(app)
    app.state.caches.drop("predictions.models")  # as after a restart
    base = f"{API}/projects/{project_id}/models/{model['id']}"
    missing = client.get(f"{base}/neighbors?item=NOPE&k=3", headers=auth)
    assert missing.status_code == 404 and "NOPE" in missing.text
    assert client.post(f"{base}/predict", headers=auth, json={"items": ["b0"]}).status_code == 200
    assert client.get(f"{base}/embedding", headers=auth).status_code == 200
    pairs = {"pairs": [["b0", "b1"]]}
    assert client.post(f"{base}/distances", headers=auth, json=pairs).status_code == 200
    assert client.get(f"{base}/neighbors?item=b0&k=3", headers=auth).status_code == 200
    assert client.post(f"{base}/predict", headers=auth, json={"items": ["NOPE"]}).status_code == 404
    assert client.post(f"{base}/predict", headers=auth, json={"items": ["b1"]}).status_code == 200


def test_a_fit_that_stops_at_max_iter_says_it_did_not_converge(app, client, auth, blob_project):
    project_id, _ = blob_project
    models = {
        name: create_model(client, auth, project_id, name=name, kind="tete", params=params)
        for name, params in (
            ("short", {"max_iter": 5, "n_components": 2}),
            ("line", {"max_iter": 5, "n_components": 1, "t": "STE"}),
            ("settled", {"tol": 1e-3, "n_components": 2}),
        )
    }
    _run_jobs(app)
    served = {
        name: get_model(client, auth, project_id, model["id"])["serving"]
        for name, model in models.items()
    }
    version = served["short"]
    assert version["converged"] is False and version["metrics"]["converged"] is False
    assert version["metrics"]["steps"] == 5
    assert "not converged: stopped at max_iter (5 steps)" in version["message"]
    version = served["settled"]
    assert version["converged"] is True and "not converged" not in version["message"]
    assert version["metrics"]["steps"] < 1000
    # A line is fitted again after each unfolding: the message counts every step.
    version = served["line"]
    assert version["converged"] is False and version["metrics"]["steps"] > 5
    assert (
        f"not converged: stopped at max_iter (5 steps; a line is fitted again after it is "
        f"unfolded: {version['metrics']['steps']} in all)"
    ) in version["message"]


def test_a_loss_fixed_by_name_is_the_one_fitted(app, client, auth, blob_project):
    """`t` names a loss too (STE and SOE have no temperature to give): a researcher fixes
    one so, and the gain's refits keep the loss a version chose so."""
    assert LOSS_NAMES == tuple(NAMED_LOSSES)
    project_id, _ = blob_project
    model = create_model(
        client,
        auth,
        project_id,
        name="ste",
        kind="tete",
        params={"t": "STE", "n_components": 2, "max_iter": 100},
    )
    _run_jobs(app)
    metrics = get_model(client, auth, project_id, model["id"])["serving"]["metrics"]
    assert metrics["loss"] == "STE" and "selection" not in metrics


@pytest.mark.parametrize(
    ("kind", "metrics", "fixed"),
    [
        ("tete", {"n_components": 3, "loss": "SOE", "t": 0.1}, {"n_components": 3, "t": "SOE"}),
        ("tete", {"n_components": 5, "loss": "t=1.5", "t": 1.5}, {"n_components": 5, "t": 1.5}),
        (
            "choice",
            {"l1": 0.004, "n_components": 41, "selection": {"dimensions": 512}},
            {"l1": 0.004, "n_components": 512},
        ),
    ],
)
def test_what_a_version_chose_is_a_parameter_its_kind_takes(kind, metrics, fixed):
    """The gain refits with a version's choices as parameters: each must pass the kind's
    own checks."""
    given = checked_params(ModelKind(kind), {})
    chosen = kinds.of(kind).as_chosen(given, metrics)
    assert checked_params(ModelKind(kind), chosen) == chosen
    assert {name: value for name, value in chosen.items() if value != given[name]} == fixed


def _place_near_b0(client, auth, project_id, model_id, X, keys):
    """A new item, "stranger", answered about by b0's features."""
    return _predict(
        client,
        auth,
        project_id,
        model_id,
        new_items=[{"key": "stranger", "triplets": _answers_near(X, 0, keys)}],
    )


def _answers_near(X, item: int, keys, n: int = 300) -> list[list[str]]:
    """[closer, farther] answers of a new point beside `item` about training pairs."""
    rng = np.random.default_rng(0)
    point = X[item] + 0.01
    pairs = np.array([rng.choice(N_TRAIN, 2, replace=False) for _ in range(n)])
    near = np.linalg.norm(X[pairs[:, 0]] - point, axis=1) < np.linalg.norm(
        X[pairs[:, 1]] - point, axis=1
    )
    ordered = np.where(near[:, None], pairs, pairs[:, ::-1])
    return [[keys[a], keys[b]] for a, b in ordered]


def test_tripletboost_predicts_as_the_library_does_and_classifies_new_items(
    app, client, auth, blob_project, blobs
):
    X, y, keys = blobs
    project_id, triplets = blob_project
    model = create_model(
        client,
        auth,
        project_id,
        name="boost",
        kind="tripletboost",
        params={"n_iter": 3000, "cv_folds": 3, "random_state": 4},
    )
    _run_jobs(app)
    version = get_model(client, auth, project_id, model["id"])["serving"]
    assert version["answers_count"] == 3000
    assert {"cv", "test", "classifiers"} <= set(version["metrics"])
    assert version["metrics"]["cv"]["folds"] == 3

    offline = TripletBoost(n_iter=3000, random_state=4).fit(
        triplets, np.arange(N_TRAIN), y[:N_TRAIN].astype(str)
    )
    asked = keys[N_TRAIN:]
    expected = offline.predict(triplets, np.arange(N_TRAIN, len(X)))
    body = _predict(client, auth, project_id, model["id"], items=asked).json()
    assert [row["label"] for row in body["predictions"]] == [
        None if label is None else str(label) for label in expected
    ]
    test_truth = y[N_TRAIN : N_TRAIN + N_TEST].astype(str)
    assert version["metrics"]["test"]["accuracy"] == pytest.approx(
        np.mean(
            [p == t for p, t in zip(expected[:N_TEST], test_truth, strict=True) if p is not None]
        )
    )

    # New items beside b0..b9, answered by their features about pairs of training items:
    # the labels the library gives for the same answers, and mostly the right ones.
    answers = [_answers_near(X, item, keys, n=1000) for item in range(10)]
    found = _predict(
        client,
        auth,
        project_id,
        model["id"],
        new_items=[{"triplets": pairs} for pairs in answers],
    ).json()["predictions"]
    position = {key: i for i, key in enumerate(keys)}
    new_triplets = np.array(
        [
            (len(X) + number, position[closer], position[farther])
            for number, pairs in enumerate(answers)
            for closer, farther in pairs
        ]
    )
    library = offline.predict(new_triplets, len(X) + np.arange(10))
    assert [row["label"] for row in found] == [str(label) for label in library]
    assert [row["key"] for row in found] == [f"new-{i}" for i in range(10)]
    assert np.mean(library == y[:10].astype(str)) >= 0.8

    # Bad input: clear 4xx naming what is wrong.
    empty = _predict(client, auth, project_id, model["id"], new_items=[{"triplets": []}])
    assert empty.status_code == 400 and "new_items[0].triplets is empty" in empty.text
    unknown = _predict(client, auth, project_id, model["id"], items=["b1", "nope"])
    assert unknown.status_code == 404 and "nope" in unknown.text
    features = _predict(client, auth, project_id, model["id"], new_items=[{"features": [1.0]}])
    assert features.status_code == 400 and "give triplets" in features.text
    nothing = _predict(client, auth, project_id, model["id"], items=[])
    assert nothing.status_code == 400
    embedding = client.get(
        f"{API}/projects/{project_id}/models/{model['id']}/embedding", headers=auth
    )
    assert embedding.status_code == 400 and "no embedding" in embedding.text


def test_a_tripletboost_asked_to_warm_start_boosts_its_runs_on_through_a_refit(
    app, client, auth, blob_project, blobs
):
    X, y, keys = blobs
    project_id, first = blob_project
    params = {"n_iter": 1000, "n_runs": 4, "cv_folds": 0, "warm_start": True, "random_state": 2}
    model = create_model(client, auth, project_id, name="on", kind="tripletboost", params=params)
    _run_jobs(app)
    later = random_triplets(len(X), 1000, FeatureOracle(X), random_state=8)
    upload_triplets(client, auth, project_id, later, keys)
    refit_check(app.state.session_factory)
    _run_jobs(app)
    serving = get_model(client, auth, project_id, model["id"])["serving"]
    assert serving["number"] == 2 and "warm start" in serving["message"]
    assert serving["metrics"]["boosting_rounds"] == 2 * 1000 * 4
    assert serving["metrics"]["boosted_runs"] == 4

    offline = TripletBoost(n_iter=1000, n_runs=4, random_state=2)
    offline.fit(first, np.arange(N_TRAIN), y[:N_TRAIN].astype(str)).partial_fit(later)
    expected = offline.predict(np.concatenate([first, later]), np.arange(N_TRAIN, len(X)))
    body = _predict(client, auth, project_id, model["id"], items=keys[N_TRAIN:]).json()
    assert [row["label"] for row in body["predictions"]] == [
        None if label is None else str(label) for label in expected
    ]


def test_passive_models_refit_as_answers_grow_and_old_versions_stay(
    app, client, auth, blob_project, blobs
):
    X, _, keys = blobs
    project_id, _ = blob_project
    model = create_model(
        client,
        auth,
        project_id,
        name="grows",
        kind="tete",
        params={"max_iter": 100},
        refit_growth=0.5,
        min_answers=1000,
        train=False,
    )
    sessions = app.state.session_factory
    refit_check(sessions)
    _run_jobs(app)
    first = get_model(client, auth, project_id, model["id"])["serving"]
    assert first["number"] == 1 and first["trigger"] == "answers grew"

    oracle = FeatureOracle(X)
    upload_triplets(client, auth, project_id, random_triplets(len(X), 1000, oracle, 1), keys)
    refit_check(sessions)  # 1,000 new on 3,000: under half as many again
    assert get_model(client, auth, project_id, model["id"])["latest"]["number"] == 1

    upload_triplets(client, auth, project_id, random_triplets(len(X), 600, oracle, 2), keys)
    refit_check(sessions)
    latest = get_model(client, auth, project_id, model["id"])["latest"]
    assert latest["number"] == 2 and latest["status"] == "queued"
    refit_check(sessions)  # one fit at a time
    assert get_model(client, auth, project_id, model["id"])["latest"]["number"] == 2
    _run_jobs(app)
    model = get_model(client, auth, project_id, model["id"])
    assert model["serving"]["number"] == 2
    assert model["serving"]["answers_count"] + model["serving"]["heldout_count"] == 4600
    assert model["serving"]["warm_start_from"] is not None
    assert "warm start" in model["serving"]["message"]

    versions = client.get(
        f"{API}/projects/{project_id}/models/{model['id']}/versions", headers=auth
    ).json()
    assert [v["number"] for v in versions] == [2, 1]
    old = client.get(
        f"{API}/projects/{project_id}/models/{model['id']}/embedding?version=1", headers=auth
    ).json()
    assert old["version"] == 1

    manual = client.post(f"{API}/projects/{project_id}/models/{model['id']}/train", headers=auth)
    assert manual.status_code == 202 and manual.json()["number"] == 3
    again = client.post(f"{API}/projects/{project_id}/models/{model['id']}/train", headers=auth)
    assert again.json()["number"] == 3  # the fit already queued, not a second one
    cancelled = client.post(
        f"{API}/projects/{project_id}/models/{model['id']}/cancel", headers=auth
    )
    assert cancelled.json()["status"] == "cancelled"
    assert get_model(client, auth, project_id, model["id"])["serving"]["number"] == 2
    refit_check(sessions)  # a cancelled fit is not queued again until answers grow
    assert get_model(client, auth, project_id, model["id"])["latest"]["number"] == 3


def test_smerf_and_disdf_learn_metrics_from_features(app, client, auth, blob_project, blobs):
    X, y, keys = blobs
    project_id, _ = blob_project
    smerf = create_model(
        client, auth, project_id, name="smerf", kind="smerf", params={"n_estimators": 30}
    )
    disdf = create_model(
        client,
        auth,
        project_id,
        name="disdf",
        kind="disdf",
        params={"n_estimators": 20, "max_levels": 2},
    )
    _run_jobs(app)
    for model in (smerf, disdf):
        version = get_model(client, auth, project_id, model["id"])["serving"]
        assert version is not None, get_model(client, auth, project_id, model["id"])["latest"]
        assert version["metrics"]["test"]["accuracy"] > 0.9
        # Noiseless answers from the same features: the metric agrees with most of them.
        assert version["metrics"]["heldout_triplet_error"] < 0.3

        test_keys = keys[N_TRAIN : N_TRAIN + N_TEST]
        body = _predict(client, auth, project_id, model["id"], items=test_keys).json()
        labels = [row["label"] for row in body["predictions"]]
        assert np.mean(np.array(labels) == y[N_TRAIN : N_TRAIN + N_TEST].astype(str)) > 0.9

        new = _predict(
            client,
            auth,
            project_id,
            model["id"],
            new_items=[{"key": "twin", "features": X[0].tolist()}],
        ).json()["predictions"][0]
        assert new["label"] == str(y[0])
        wrong = _predict(
            client, auth, project_id, model["id"], new_items=[{"features": [1.0, 2.0]}]
        )
        assert wrong.status_code == 400
        assert "has 2 values; the project's items have 4" in wrong.text

        distances = client.post(
            f"{API}/projects/{project_id}/models/{model['id']}/distances",
            headers=auth,
            json={"pairs": [["b0", "b0"], ["b0", "b1"], ["b1", "b0"]]},
        ).json()["distances"]
        assert distances[0] == pytest.approx(0) and distances[1] == pytest.approx(distances[2])
        neighbors = client.get(
            f"{API}/projects/{project_id}/models/{model['id']}/neighbors?item=b0&k=5",
            headers=auth,
        ).json()["neighbors"]
        assert len(neighbors) == 5 and "b0" not in [row["key"] for row in neighbors]
        assert [row["distance"] for row in neighbors] == sorted(r["distance"] for r in neighbors)
        same_class = [y[keys.index(row["key"])] == y[0] for row in neighbors]
        assert np.mean(same_class) >= 0.8

    smerf_embedding = client.get(
        f"{API}/projects/{project_id}/models/{smerf['id']}/embedding", headers=auth
    )
    assert smerf_embedding.status_code == 400 and "distances, not coordinates" in (
        smerf_embedding.text
    )
    disdf_embedding = client.get(
        f"{API}/projects/{project_id}/models/{disdf['id']}/embedding", headers=auth
    ).json()
    assert disdf_embedding["dimension"] >= 3 and len(disdf_embedding["keys"]) == len(X)


def test_smerf_learns_from_an_uploaded_matrix_or_an_embedding(
    app, client, auth, blob_project, blobs
):
    X, _, keys = blobs
    project_id, _ = blob_project
    D = np.abs(X[:30, :1] - X[:30, :1].T)
    matrix = create_model(
        client,
        auth,
        project_id,
        name="from-matrix",
        kind="smerf",
        params={"n_estimators": 20, "dissimilarity": "matrix"},
        matrix={"keys": keys[:30], "values": D.tolist()},
    )
    tete = create_model(client, auth, project_id, name="t", kind="tete", params={"max_iter": 100})
    _run_jobs(app)
    from_embedding = create_model(
        client,
        auth,
        project_id,
        name="from-embedding",
        kind="smerf",
        params={"n_estimators": 20, "dissimilarity": "embedding", "embedding_model_id": tete["id"]},
    )
    _run_jobs(app)
    for model in (matrix, from_embedding):
        version = get_model(client, auth, project_id, model["id"])["serving"]
        assert version is not None, get_model(client, auth, project_id, model["id"])["latest"]
    assert (
        get_model(client, auth, project_id, matrix["id"])["serving"]["metrics"]["training_items"]
        == 30
    )

    asymmetric = D.copy()
    asymmetric[0, 1] += 1
    bad = client.post(
        f"{API}/projects/{project_id}/models",
        headers=auth,
        json={
            "name": "bad",
            "kind": "smerf",
            "params": {"dissimilarity": "matrix"},
            "matrix": {"keys": keys[:30], "values": asymmetric.tolist()},
        },
    )
    assert bad.status_code == 400 and "symmetric" in bad.text

    # The embedding a SMERF model learns from stays until that model goes.
    t_url = f"{API}/projects/{project_id}/models/{tete['id']}"
    kept = client.delete(t_url, headers=auth)
    assert kept.status_code == 409
    assert kept.json()["detail"] == (
        f"model {tete['id']} (t) is the embedding SMERF model 'from-embedding' learns from: "
        "delete that first"
    )
    assert client.get(t_url, headers=auth).status_code == 200
    gone = client.delete(f"{API}/projects/{project_id}/models/{from_embedding['id']}", headers=auth)
    assert gone.status_code == 204
    assert client.delete(t_url, headers=auth).status_code == 204


def test_items_without_answers_have_no_place_in_an_embedding_nor_in_smerfs_d(
    app, client, auth, project, blobs
):
    """Answers about the 60 training items only: the 30 others keep their random starting
    points in t-ETE, so they are flagged, left out of neighbours, labels and SMERF's D,
    and SMERF is measured only on answers the embedding never fitted."""
    X, _, keys = blobs
    project_id = project["id"]
    upload_blob_items(client, auth, project_id, blobs)
    triplets = random_triplets(N_TRAIN, 3000, FeatureOracle(X[:N_TRAIN]), random_state=0)
    upload_triplets(client, auth, project_id, triplets, keys)
    # A tenth of the answers kept back, for SMERF to be measured on.
    tete = create_model(
        client,
        auth,
        project_id,
        name="t",
        kind="tete",
        params={"max_iter": 100, "heldout_share": 0.1},
    )
    _run_jobs(app)
    base = f"{API}/projects/{project_id}/models/{tete['id']}"
    embedding = client.get(f"{base}/embedding", headers=auth).json()
    assert embedding["keys"] == keys
    assert embedding["answered"] == [True] * N_TRAIN + [False] * (len(keys) - N_TRAIN)
    exported = client.get(f"{base}/embedding?format=csv", headers=auth).text
    rows = list(csv.reader(io.StringIO(exported)))
    assert rows[0][0] == "key" and rows[0][-1] == "answered"
    assert rows[0][1:-1] == [f"dim_{axis}" for axis in range(embedding["dimension"])]
    assert rows[1][-1] == "true" and rows[-1][-1] == "false"
    version = get_model(client, auth, project_id, tete["id"])["serving"]
    assert version["metrics"]["items_answered"] == N_TRAIN

    neighbors = client.get(f"{base}/neighbors?item=b0&k=100", headers=auth).json()["neighbors"]
    assert {row["key"] for row in neighbors} == set(keys[1:N_TRAIN])
    far = client.post(f"{base}/distances", headers=auth, json={"pairs": [["b0", "b80"]]})
    assert far.status_code == 400 and "b80" in far.text and "no answers" in far.text
    labels = _predict(client, auth, project_id, tete["id"], items=["b1", "b80"]).json()
    assert labels["predictions"][0]["label"] is not None
    assert labels["predictions"][1]["label"] is None

    smerf = create_model(
        client,
        auth,
        project_id,
        name="smerf",
        kind="smerf",
        params={"n_estimators": 20, "dissimilarity": "embedding", "embedding_model_id": tete["id"]},
    )
    _run_jobs(app)
    metrics = get_model(client, auth, project_id, smerf["id"])["serving"]["metrics"]
    assert metrics["training_items"] == N_TRAIN
    assert metrics["answers_checked"] == version["heldout_count"] == 300


def test_bad_model_requests_get_clear_errors_and_change_nothing(client, auth, blob_project):
    project_id, _ = blob_project
    url = f"{API}/projects/{project_id}/models"
    wrong = client.post(
        url, headers=auth, json={"name": "x", "kind": "tete", "params": {"n_components": 0}}
    )
    assert wrong.status_code == 422
    assert wrong.json()["detail"][0]["loc"] == ["body", "params", "n_components"]
    unknown_loss = client.post(
        url, headers=auth, json={"name": "x", "kind": "tete", "params": {"t": "tSNE"}}
    )
    assert unknown_loss.status_code == 422
    assert unknown_loss.json()["detail"][0]["loc"] == ["body", "params", "t"]
    assert unknown_loss.json()["detail"][0]["msg"] == (
        "must be a number from 1 to 3, 't-STE', 't-ETE', 'STE', 'SOE', 't-STE(d-1)', or 'auto'"
    )
    extra = client.post(
        url, headers=auth, json={"name": "x", "kind": "tete", "params": {"dims": 3}}
    )
    assert extra.status_code == 422 and extra.json()["detail"][0]["loc"][-1] == "dims"
    endless = client.post(
        url,
        headers=auth,
        json={"name": "x", "kind": "tripletboost", "params": {"n_iter": 2_000_000}},
    )
    assert endless.status_code == 422 and endless.json()["detail"][0]["loc"] == ["body", "params"]
    assert endless.json()["detail"][0]["msg"] == (
        "n_iter x n_runs must be at most 20,000,000 rounds in all; got 2,000,000 x 20"
    )
    no_build = client.post(url, headers=auth, json={"name": "x", "kind": "comprf"})
    assert no_build.status_code == 400 and "build_id" in no_build.text
    assert client.get(url, headers=auth).json() == []
    create_model(client, auth, project_id, name="x", kind="tete", train=False)
    twice = client.post(url, headers=auth, json={"name": "x", "kind": "tete"})
    assert twice.status_code == 409 and "already has a model named 'x'" in twice.text
    missing = client.get(f"{url}/999999", headers=auth)
    assert missing.status_code == 404


def test_a_model_without_features_to_learn_from_is_refused(client, auth, project):
    client.post(
        f"{API}/projects/{project['id']}/items",
        headers=auth,
        files={"file": ("i.csv", "key,label\na,x\nb,y\n")},
    )
    response = client.post(
        f"{API}/projects/{project['id']}/models", headers=auth, json={"name": "s", "kind": "smerf"}
    )
    assert response.status_code == 400 and "have none" in response.text


def test_a_model_made_before_the_answers_waits_for_them_instead_of_failing(
    app, client, auth, project
):
    """A new study's model has nothing to fit: it is not fitted (no red "v1 failed"), a
    "Train now" says why at once, and the refit check fits it once its answers come."""
    keys = [f"k{i}" for i in range(12)]
    client.post(
        f"{API}/projects/{project['id']}/items",
        headers=auth,
        files={"file": ("i.csv", "key\n" + "\n".join(keys) + "\n")},
    )
    model = create_model(
        client,
        auth,
        project["id"],
        name="early",
        kind="tete",
        params={"max_iter": 20},
        min_answers=30,
    )
    _run_jobs(app)
    assert get_model(client, auth, project["id"], model["id"])["latest"] is None
    with unit_of_work(app.state.session_factory) as session:
        assert session.query(Job).count() == 0
    page = client.get(f"/projects/{project['id']}/models", headers=auth)
    assert "Not fitted yet" in page.text and "failed" not in page.text

    train = client.post(f"{API}/projects/{project['id']}/models/{model['id']}/train", headers=auth)
    assert train.status_code == 409
    assert train.json()["detail"] == (
        f"t-ETE needs at least 10 answers to fit; project {project['id']} has 0: "
        "it fits once raters have answered"
    )
    assert get_model(client, auth, project["id"], model["id"])["latest"] is None

    rng = np.random.default_rng(0)
    triplets = [rng.choice(12, size=3, replace=False).tolist() for _ in range(30)]
    upload_triplets(client, auth, project["id"], triplets, keys)
    refit_check(app.state.session_factory)
    _run_jobs(app)
    served = get_model(client, auth, project["id"], model["id"])["serving"]
    assert served["number"] == 1 and served["trigger"] == "answers grew"


def test_a_fit_that_cannot_succeed_fails_once_with_its_reason(app, client, auth, project):
    """No labelled classes: TripletBoost fails at once (no retries) and says why."""
    client.post(
        f"{API}/projects/{project['id']}/items",
        headers=auth,
        files={"file": ("i.csv", "key\na\nb\nc\n")},
    )
    upload_triplets(client, auth, project["id"], [[0, 1, 2]], ["a", "b", "c"])
    model = create_model(client, auth, project["id"], name="b", kind="tripletboost")
    _run_jobs(app)
    latest = get_model(client, auth, project["id"], model["id"])["latest"]
    assert latest["status"] == "failed"
    assert "at least two classes" in latest["message"]
    with unit_of_work(app.state.session_factory) as session:
        job = session.get(Job, latest["job_id"])
        assert job.status is JobStatus.failed and job.attempts == 1


def test_a_dead_workers_fit_is_taken_over_and_finishes(app, client, auth, blob_project):
    project_id, _ = blob_project
    model = create_model(client, auth, project_id, name="t", kind="tete", params={"max_iter": 50})
    sessions = app.state.session_factory
    with sessions() as session:  # a worker claims the job, then dies without a word
        job = queue.claim_next(session=session, worker_id="dead", stale_after=timedelta(seconds=60))
        assert job is not None
    assert Worker(sessions, stale_after_seconds=60).run(until_idle=True) == 0  # not stale yet
    survivor = Worker(sessions, stale_after_seconds=0.0)
    assert survivor.run(until_idle=True) == 1
    version = get_model(client, auth, project_id, model["id"])["serving"]
    assert version is not None and version["number"] == 1
    with unit_of_work(sessions) as session:
        job = session.get(Job, version["job_id"])
        assert job.status is JobStatus.succeeded and job.attempts == 2


def test_a_smerf_model_learns_only_from_an_embedding_of_its_own_project(
    app, client, auth, new_token, blob_project
):
    """Creating, changing and importing a SMERF model: its embedding is a t-ETE model of
    its own project. Another researcher's model is refused in the words a model that
    does not exist is, so nothing tells whether it does; an archive's SMERF model learns
    from the archive's own t-ETE model, made again there."""
    project_id, _ = blob_project
    mine = create_model(client, auth, project_id, name="t", kind="tete", train=False)
    mallory = new_token("mallory")
    theirs_project = client.post(f"{API}/projects", headers=mallory, json={"name": "m"}).json()
    theirs = create_model(client, mallory, theirs_project["id"], name="x", kind="tete", train=False)
    smerf = create_model(
        client,
        auth,
        project_id,
        name="s",
        kind="smerf",
        train=False,
        params={"dissimilarity": "embedding", "embedding_model_id": mine["id"]},
    )
    url = f"{API}/projects/{project_id}/models"
    answers = {}
    for name, source in (("theirs", theirs["id"]), ("none", 999_999)):
        for how, request in (
            (
                "create",
                lambda s: client.post(
                    url,
                    headers=auth,
                    json={
                        "name": f"s-{s}",
                        "kind": "smerf",
                        "params": {"dissimilarity": "embedding", "embedding_model_id": s},
                    },
                ),
            ),
            (
                "change",
                lambda s: client.patch(
                    f"{url}/{smerf['id']}", headers=auth, json={"params": {"embedding_model_id": s}}
                ),
            ),
        ):
            response = request(source)
            assert response.status_code == 400, (name, how, response.text)
            answers[name, how] = response.json()["detail"].replace(str(source), "N")
    assert answers["theirs", "create"] == answers["none", "create"]
    assert answers["theirs", "change"] == answers["none", "change"]
    assert "name a t-ETE model of this project" in answers["theirs", "change"]
    kept = client.get(f"{url}/{smerf['id']}", headers=auth).json()
    assert kept["params"]["embedding_model_id"] == mine["id"]

    archive = client.get(f"{API}/projects/{project_id}/archive", headers=auth)
    assert archive.status_code == 200
    create_model(client, auth, project_id, name="padding", kind="tete", train=False)  # ids move on
    made = client.post(
        f"{API}/project-archives", headers=auth, files={"file": ("a.zip", archive.content)}
    )
    assert made.status_code == 201, made.text
    copied = {
        m["name"]: m
        for m in client.get(f"{API}/projects/{made.json()['id']}/models", headers=auth).json()
    }
    assert copied["s"]["params"]["embedding_model_id"] == copied["t"]["id"] != mine["id"]


def test_a_fit_holds_out_each_judgements_triplets_together(app, client, auth, project):
    """ "2 of 6" screens stored with the 9 triplets each implies, beside plain uploaded
    triplets: the fit's snapshot labels every answer with its judgement (a plain one
    with a label of its own), and the held-out answers the served model is measured on
    are whole judgements, in the fit and in its cross-validation."""
    from sqlalchemy import select

    from app.formats import RANK
    from app.models import Item, LearnedModel, Project
    from app.training import fitting, runs
    from tests.support.judgements import store_judgements
    from tests.support.uploads import upload

    pid = project["id"]
    items = "key\n" + "".join(f"p{i}\n" for i in range(40))
    assert upload(client, auth, pid, "items", "items.csv", items).status_code == 201
    points = np.random.default_rng(0).normal(size=(40, 2))
    rng = np.random.default_rng(1)
    plain = random_triplets(40, 300, FeatureOracle(points, random_state=2), random_state=3)
    rows = "".join(f"p{a},p{c},p{f}\n" for a, c, f in plain)
    uploaded = upload(client, auth, pid, "triplets", "t.csv", "anchor,closer,farther\n" + rows)
    assert uploaded.status_code == 201, uploaded.text
    with unit_of_work(app.state.session_factory) as session:
        ids = dict(session.execute(select(Item.key, Item.id).where(Item.project_id == pid)).all())
        item_id = np.array([ids[f"p{i}"] for i in range(40)])
        screens = []
        for _ in range(60):
            reference, *shown = rng.choice(40, 7, replace=False)
            near = sorted(shown, key=lambda i: np.linalg.norm(points[i] - points[reference]))
            screens.append(
                (
                    RANK,
                    [int(item_id[reference])],
                    [int(item_id[i]) for i in shown],
                    [int(item_id[i]) for i in near[:2]],
                )
            )
        judged = store_judgements(session, pid, screens)
    model = create_model(
        client,
        auth,
        pid,
        name="judged",
        kind="tete",
        params={"max_iter": 100, "heldout_share": 0.2, "n_components": "auto"},
    )
    with app.state.session_factory() as session:
        snap = runs.snapshot(
            session, session.get(Project, pid), session.get(LearnedModel, model["id"])
        )
    assert len(snap.answers) == 300 + 60 * 9
    assert sorted(set(snap.groups[snap.groups > 0].tolist())) == judged
    assert np.bincount(snap.groups[snap.groups > 0]).max() == 9
    assert len(set(snap.groups[snap.groups < 0].tolist())) == 300

    fit_rows, held = fitting.heldout_split(len(snap.answers), 0.2, 0, None, snap.groups)
    assert not set(snap.groups[fit_rows].tolist()) & set(snap.groups[held].tolist())
    assert abs(len(held) - 0.2 * len(snap.answers)) < 9
    _run_jobs(app)
    version = get_model(client, auth, pid, model["id"])["serving"]
    assert version["status"] == "ready", version
    # The fit's split is the grouped one (an ungrouped split holds out exactly 20 %).
    assert version["heldout_count"] == len(held) != round(0.2 * len(snap.answers))
    assert version["metrics"]["selection"]["folds"] == 3
