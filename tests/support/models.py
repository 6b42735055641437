"""A project for models through the API: items with labels and features, answers, and
models made and read."""

from __future__ import annotations

import json

from sklearn.datasets import make_blobs

from app.learn import FeatureOracle, random_triplets

API = "/api/v1"
N_TRAIN, N_TEST, N_UNLABELLED = 60, 15, 15


def model_blobs():
    """90 points with 4 features in 3 blobs, and their keys: (X, y, keys)."""
    X, y = make_blobs(
        n_samples=N_TRAIN + N_TEST + N_UNLABELLED, centers=3, n_features=4, random_state=3
    )
    return X, y, [f"b{i}" for i in range(len(X))]


def blob_project(client, auth, project_id: int, blobs):
    """90 items with 4 features: 60 labelled for training, 15 labelled test items, 15
    unlabelled; 3,000 noiseless random answers. Returns (project id, the answers)."""
    X, _, keys = blobs
    upload_blob_items(client, auth, project_id, blobs)
    triplets = random_triplets(len(X), 3000, FeatureOracle(X), random_state=0)
    upload_triplets(client, auth, project_id, triplets, keys)
    return project_id, triplets


def upload_triplets(client, auth, project_id, triplets, keys):
    rows = [[keys[a], keys[p], keys[q]] for a, p, q in triplets]
    response = client.post(
        f"{API}/projects/{project_id}/triplets",
        headers=auth,
        files={"file": ("t.json", json.dumps(rows))},
    )
    assert response.status_code == 201, response.text


def upload_blob_items(client, auth, project_id, blobs):
    X, y, keys = blobs
    lines = ["key,label,split,features"]
    for i, key in enumerate(keys):
        if i < N_TRAIN:
            label, split = y[i], "train"
        elif i < N_TRAIN + N_TEST:
            label, split = y[i], "test"
        else:
            label, split = "", "unlabelled"
        lines.append(f"{key},{label},{split},{' '.join(map(str, X[i]))}")
    response = client.post(
        f"{API}/projects/{project_id}/items",
        headers=auth,
        files={"file": ("items.csv", "\n".join(lines))},
    )
    assert response.status_code == 201, response.text


def create_model(client, auth, project_id, **body):
    response = client.post(f"{API}/projects/{project_id}/models", headers=auth, json=body)
    assert response.status_code == 201, response.text
    return response.json()


def get_model(client, auth, project_id, model_id):
    return client.get(f"{API}/projects/{project_id}/models/{model_id}", headers=auth).json()
