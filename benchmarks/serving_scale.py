"""Serving a model of an ImageNet-sized study (issue 33): `predict`, `neighbors` and
`distances` over HTTP with 50,000 items, against the same answers computed in-process.

A real `closer serve --workers 2` and one `closer worker` on a throwaway PostgreSQL
server. A project of `--items` items around 50 planted clusters in 8-D (the clusters
are the labels; the last tenth unlabelled) holds `--answers` answers with human-like
noise (as benchmarks/imagenet_scale.py plants them), and a t-ETE model with the
service's defaults (dimension and loss chosen) is fitted on them. Then, sequentially
and each `--requests` times, p50/p99 of:

- `predict` for 100 unlabelled items (the model's kNN labels);
- `neighbors`: the 10 nearest items of a random item;
- `distances` of 100 random pairs.

Peers in the same run: the health route through the same processes and client (what
HTTP alone costs), and the same three answers computed in this process from the
embedding (scikit-learn's NearestNeighbors for the neighbours). Target: every route
under 50 ms p99.

    .venv/bin/python benchmarks/serving_scale.py [--items 50000] [--answers 500000]
        [--requests 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from sklearn.neighbors import NearestNeighbors

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.imagenet_scale import planted_study  # noqa: E402
from benchmarks.model_serving import (  # noqa: E402
    log,
    percentiles,
    timed,
    upload_study,
    wait_ready,
)
from tests.support.postgres import start_postgres  # noqa: E402
from tests.support.service import ServiceProcesses, database_with_token  # noqa: E402

TARGET_MS = 50.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--answers", type=int, default=500_000)
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()

    server = start_postgres()
    root = Path(tempfile.mkdtemp(prefix="closer-serving-scale-"))
    service = None
    try:
        url, token = database_with_token(server, "serving_scale")
        service = ServiceProcesses(url, root / "data", web_processes=2, workers=1).start()
        http = httpx.Client(
            base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=600
        )
        _, cluster, train, _ = planted_study(args.items, args.answers, latent=8, clusters=50)
        keys = [f"img{i:06d}" for i in range(args.items)]
        labelled = args.items - args.items // 10  # the last tenth unlabelled
        labels = [f"c{c}" if i < labelled else None for i, c in enumerate(cluster)]
        project = upload_study(http, "ImageNet-sized", keys, labels, train)
        created = http.post(
            f"/api/v1/projects/{project}/models",
            json={"name": "map", "kind": "tete", "auto_refit": False},
        )
        created.raise_for_status()
        model_id = created.json()["id"]
        started = time.perf_counter()
        wait_ready(http, project, model_id)
        log(f"t-ETE default ready {time.perf_counter() - started:.0f} s after asking")
        base = f"/api/v1/projects/{project}/models/{model_id}"
        pick = np.random.default_rng(1)
        unlabelled = keys[labelled:]

        def predict():
            chosen = [unlabelled[i] for i in pick.choice(len(unlabelled), 100, replace=False)]
            response = http.post(f"{base}/predict", json={"items": chosen})
            response.raise_for_status()
            assert len(response.json()["predictions"]) == 100

        def neighbors():
            item = keys[pick.integers(len(keys))]
            response = http.get(f"{base}/neighbors", params={"item": item, "k": 10})
            response.raise_for_status()
            assert len(response.json()["neighbors"]) == 10

        def distances():
            pairs = [[keys[a], keys[b]] for a, b in pick.integers(len(keys), size=(100, 2))]
            response = http.post(f"{base}/distances", json={"pairs": pairs})
            response.raise_for_status()
            assert len(response.json()["distances"]) == 100

        routes = {"predict": predict, "neighbors": neighbors, "distances": distances}
        for call in routes.values():
            for _ in range(4):  # both web processes load the version
                call()
        served = {name: percentiles(timed(call, args.requests)) for name, call in routes.items()}
        health = percentiles(
            timed(lambda: http.get("/api/v1/health").raise_for_status(), args.requests)
        )

        embedding = np.array(http.get(f"{base}/embedding").json()["coordinates"])
        index = NearestNeighbors(n_neighbors=11).fit(embedding)
        n = len(keys)

        def nearest_of_100():
            index.kneighbors(embedding[pick.integers(labelled, n, 100)])

        def nearest_of_one():
            index.kneighbors(embedding[[pick.integers(n)]])

        def pair_distances():
            first, second = embedding[pick.integers(n, size=(2, 100))]
            np.linalg.norm(first - second, axis=1)

        in_process = {
            name: percentiles(timed(call, args.requests))
            for name, call in (
                ("predict", nearest_of_100),
                ("neighbors", nearest_of_one),
                ("distances", pair_distances),
            )
        }
        print(
            f"\n{args.items:,} items, {args.answers:,} answers, t-ETE default"
            f" ({embedding.shape[1]}-D); {args.requests} sequential requests each,"
            " PostgreSQL, 2 web processes"
        )
        print("| route | p50 ms | p99 ms | in-process peer p50 / p99 ms | p99 under 50 ms |")
        print("| --- | --- | --- | --- | --- |")
        for name, found in served.items():
            peer = in_process[name]
            print(
                f"| {name} | {found['p50']:.1f} | {found['p99']:.1f} | {peer['p50']:.2f} /"
                f" {peer['p99']:.2f} | {'yes' if found['p99'] < TARGET_MS else 'NO'} |"
            )
        print(f"| health (HTTP alone) | {health['p50']:.1f} | {health['p99']:.1f} | | |")
    finally:
        if service is not None:
            service.stop()
        server.stop()


if __name__ == "__main__":
    main()
