"""The researcher's own test split (issue 16): triplets uploaded as split=test never enter a
fit or a build, and every model with distances is measured on them beside its own
held-out measure."""

from __future__ import annotations

import json

import numpy as np
from sklearn.datasets import make_blobs

from app.learn import TETE, FeatureOracle, TETESearch, random_triplets, triplet_error
from app.worker.loop import Worker

API = "/api/v1"


def _project_with_answers(client, auth, project):
    X, _ = make_blobs(n_samples=60, centers=3, n_features=3, random_state=0)
    keys = [f"k{i}" for i in range(len(X))]
    pid = project["id"]
    body = "key\n" + "\n".join(keys) + "\n"
    assert (
        client.post(
            f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", body)}
        ).status_code
        == 201
    )
    oracle = FeatureOracle(X, noise=0.05, random_state=0)
    train = random_triplets(len(X), 2000, oracle, random_state=0)
    test = random_triplets(len(X), 400, oracle, random_state=1)
    as_rows = lambda block: [[keys[a], keys[b], keys[c]] for a, b, c in block]  # noqa: E731
    response = client.post(
        f"{API}/projects/{pid}/triplets",
        headers=auth,
        files={"file": ("train.json", json.dumps(as_rows(train)))},
    )
    assert response.status_code == 201, response.text
    # Half the test split by the parameter, half by a column.
    first = as_rows(test[:200])
    response = client.post(
        f"{API}/projects/{pid}/triplets?split=test",
        headers=auth,
        files={"file": ("test.json", json.dumps(first))},
    )
    assert response.status_code == 201, response.text
    lines = "anchor,closer,farther,split\n" + "\n".join(
        f"{a},{b},{c},test" for a, b, c in as_rows(test[200:])
    )
    response = client.post(
        f"{API}/projects/{pid}/triplets", headers=auth, files={"file": ("test.csv", lines)}
    )
    assert response.status_code == 201, response.text
    return pid, keys, train, test


def test_a_test_split_is_never_fitted_and_every_model_is_measured_on_it(app, client, auth, project):
    pid, keys, train, test = _project_with_answers(client, auth, project)
    exported = client.get(f"{API}/projects/{pid}/triplets/export?format=json", headers=auth).json()
    assert [row["split"] for row in exported] == ["train"] * 2000 + ["test"] * 400
    csv_export = client.get(f"{API}/projects/{pid}/triplets/export?format=csv", headers=auth).text
    assert csv_export.splitlines()[0].endswith(",split,adaptive,arm,version,judgement")
    assert csv_export.count(",test,false,,,\n") == 400

    model = client.post(
        f"{API}/projects/{pid}/models",
        headers=auth,
        json={"name": "map", "kind": "tete", "params": {"max_iter": 200}},
    ).json()
    Worker(app.state.session_factory).run(until_idle=True)
    version = client.get(f"{API}/projects/{pid}/models/{model['id']}", headers=auth).json()[
        "serving"
    ]
    assert version["answers_count"] + version["heldout_count"] == 2000  # the test split left out
    metrics = version["metrics"]
    assert metrics["test_answers"] == 400
    # The same figure offline: the library on the training answers, measured on the test split.
    offline = TETESearch(TETE(max_iter=200, random_state=0), dimensions=None).fit(train, len(keys))
    assert metrics["test_triplet_error"] == triplet_error(offline.embedding_, test)
    assert "heldout_triplet_error" in metrics  # its own held-out measure, beside it
    assert metrics["test_triplet_error"] < 0.2


def test_a_wrong_split_is_a_row_error_and_stores_nothing(client, auth, project):
    pid = project["id"]
    body = "key\na\nb\nc\n"
    client.post(f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", body)})
    lines = "anchor,closer,farther,split\na,b,c,test\na,c,b,holdout\n"
    response = client.post(
        f"{API}/projects/{pid}/triplets", headers=auth, files={"file": ("t.csv", lines)}
    )
    assert response.status_code == 422
    problem = response.json()["detail"][0]
    assert problem["row"] == 3 and problem["column"] == "split" and "holdout" in problem["message"]
    assert (
        client.get(f"{API}/projects/{pid}/triplets/export?format=json", headers=auth).json() == []
    )
    wrong = client.post(
        f"{API}/projects/{pid}/triplets?split=validation",
        headers=auth,
        files={"file": ("t.csv", "anchor,closer,farther\na,b,c\n")},
    )
    assert wrong.status_code == 422 and "split" in wrong.text


def test_builds_never_read_the_test_split(app, client, auth, project):
    """The reader builds fold answers with: the training answers only, and its cursor
    moves past the test split (nothing is left "unread")."""
    from app.builds.service import answers_after

    pid, keys, train, _ = _project_with_answers(client, auth, project)
    with app.state.session_factory() as session:
        ids = np.array(sorted(session.scalars(_item_ids(pid)).all()))
        read, cursor = answers_after(session, pid, 0, ids)
        newest = max(row["id"] for row in _triplet_ids(session, pid))
    assert np.array_equal(read, train) and cursor == newest


def _item_ids(project_id):
    from sqlalchemy import select

    from app.models import Item

    return select(Item.id).where(Item.project_id == project_id)


def _triplet_ids(session, project_id):
    from sqlalchemy import select

    from app.models import Triplet

    return session.execute(
        select(Triplet.id.label("id")).where(Triplet.project_id == project_id)
    ).mappings()
