"""Screens against one-triplet screens: what a t-ETE embedding learns per screen answered
when raters answer odd-one-out or rank "2 of 8" screens instead of triplets.

A real `closer serve` (SQLite) runs one study per format on the same items; a simulated
crowd (`closer simulate`'s engine) answers over HTTP with human-like noise on each
decision on a screen (a softmax over distances: people err on near ties), 10 % of random
triplets wrong. After every so many screens, t-ETE (the library's estimator, the same
dimension for every format) is fitted on the triplets those screens implied, and its
error is measured on fresh uniform one-triplet answers from the same noisy raters (and
on the planted truth). The peer, in the same run, is the one-triplet study.

    .venv/bin/python benchmarks/judgement_formats.py [--items 400] [--triplet-screens 20000]

What the simulation cannot tell: a person takes longer over a grid of 9 than over a
triplet, and the errors people make on a grid need not follow the triplet's. The pages
record the time per screen (`response_time_ms`), so a real study can compare the cost
per triplet; here every screen costs one request.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from sklearn.datasets import load_digits

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.learn import TETE, FeatureOracle, TETESearch, triplet_error  # noqa: E402
from app.simulate import run_crowd  # noqa: E402
from tests.support.service import ServiceProcesses  # noqa: E402

FORMATS = {
    "triplet": {"judgement": "triplet"},
    "odd_one_out": {"judgement": "odd_one_out"},
    "rank 2 of 8": {"judgement": "rank", "shown": 8, "picks": 2},
}


def planted(items: int, dim: int, seed: int = 0) -> np.ndarray:
    """Points in `dim` dimensions around 8 cluster centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(8, dim))
    return centres[rng.integers(0, 8, items)] + rng.normal(size=(items, dim))


def digits(items: int) -> np.ndarray:
    X = load_digits().data[:items]
    return X / X.std()


def study(http: httpx.Client, name: str, X: np.ndarray, rating: dict) -> int:
    project = http.post("/api/v1/projects", json={"name": name}).json()["id"]
    rows = "key,features\n" + "".join(
        f"i{n},{' '.join(f'{v:.6g}' for v in row)}\n" for n, row in enumerate(X)
    )
    http.post(
        f"/api/v1/projects/{project}/items", files={"file": ("items.csv", rows)}
    ).raise_for_status()
    http.patch(
        f"/api/v1/projects/{project}/rating",
        json={"answers_per_rater": 0, "attention_rate": 0, "random_share": 1, **rating},
    ).raise_for_status()
    http.put(f"/api/v1/projects/{project}/link", json={"state": "open"}).raise_for_status()
    return project


def sqlite_with_token(url: str) -> str:
    from app.auth.service import create_token
    from app.core import migrations
    from app.core.db import make_engine, make_session_factory, unit_of_work

    migrations.upgrade(url)
    engine = make_engine(url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            return create_token(session=session, researcher_name="bench")
    finally:
        engine.dispose()


def answered(database: Path, project: int, position_of: dict) -> tuple[np.ndarray, np.ndarray]:
    """The project's triplets in the order answered (as item positions) and the screen
    (judgement, or the triplet itself) each came from, numbered from 0."""
    with sqlite3.connect(database) as connection:
        rows = connection.execute(
            "SELECT anchor_id, closer_id, farther_id, coalesce(judgement_id, -id) FROM triplets "
            "WHERE project_id = ? ORDER BY id",
            (project,),
        ).fetchall()
    array = np.array(rows, dtype=np.int64)
    position = np.vectorize(position_of.get)
    triplets = position(array[:, :3])
    _, screen = np.unique(array[:, 3], return_index=False, return_inverse=True)
    order = np.argsort(np.unique(screen, return_index=True)[1])  # first appearance order
    renumber = np.empty_like(order)
    renumber[order] = np.arange(len(order))
    return triplets, renumber[screen]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--dim", type=int, default=5)
    parser.add_argument("--triplet-screens", type=int, default=20_000)
    parser.add_argument("--odd-screens", type=int, default=10_000)
    parser.add_argument("--rank-screens", type=int, default=5_000)
    parser.add_argument("--raters", type=int, default=16)
    parser.add_argument("--noise", type=float, default=0.1, help="random triplets answered wrong")
    args = parser.parse_args()
    screens = {
        "triplet": args.triplet_screens,
        "odd_one_out": args.odd_screens,
        "rank 2 of 8": args.rank_screens,
    }
    datasets = {
        f"planted {args.items} in {args.dim}-D": planted(args.items, args.dim),
        f"digits {args.items} (64-D)": digits(args.items),
    }
    root = Path(tempfile.mkdtemp(prefix="closer-formats-bench-"))
    url = f"sqlite:///{root / 'closer.db'}"
    token = sqlite_with_token(url)
    service = ServiceProcesses(url, root / "data", web_processes=1, workers=0).start()
    results = []
    try:
        http = httpx.Client(
            base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=300
        )
        for data_name, X in datasets.items():
            oracle = FeatureOracle(X)
            scale = oracle.scale_for_error(args.noise)
            rng = np.random.default_rng(1)
            test = rng.integers(0, len(X), (30_000, 3))
            test = test[
                (test[:, 0] != test[:, 1]) & (test[:, 0] != test[:, 2]) & (test[:, 1] != test[:, 2])
            ]
            fresh = FeatureOracle(X, noise_scale=scale, random_state=2).answer(test)
            truth = oracle.answer(test)
            for format_name, rating in FORMATS.items():
                project = study(http, f"{data_name} · {format_name}", X, rating)
                started = time.perf_counter()
                report = asyncio.run(
                    run_crowd(
                        url=service.url,
                        project_id=project,
                        token=token,
                        raters=args.raters,
                        noise=args.noise,
                        noise_model="human",
                        think_time=0.0,
                        answers_each=screens[format_name] // args.raters,
                        seed=3,
                    )
                )
                crowd_seconds = time.perf_counter() - started
                with sqlite3.connect(root / "closer.db") as connection:
                    item_ids = [
                        row[0]
                        for row in connection.execute(
                            "SELECT id FROM items WHERE project_id = ? ORDER BY id", (project,)
                        )
                    ]
                triplets, screen = answered(
                    root / "closer.db", project, {item: n for n, item in enumerate(item_ids)}
                )
                total = int(screen.max()) + 1
                marks = sorted(
                    {m for m in (500, 1000, 2000, 3000, 5000, 10_000, 20_000) if m <= total}
                    | {total}
                )
                for mark in marks:
                    used = triplets[screen < mark]
                    model = TETESearch(
                        TETE(n_components=args.dim, random_state=0), dimensions=None
                    ).fit(used, n_items=len(X))
                    results.append(
                        {
                            "data": data_name,
                            "format": format_name,
                            "screens": mark,
                            "triplets": len(used),
                            "error": triplet_error(model.embedding_, fresh),
                            "truth": triplet_error(model.embedding_, truth),
                        }
                    )
                print(
                    f"  {data_name}, {format_name}: {report.answers} screens in "
                    f"{crowd_seconds:.0f} s ({report.answers / crowd_seconds:.0f}/s, "
                    f"p99 {report.summary()['p99_ms']} ms), {len(triplets)} triplets",
                    file=sys.stderr,
                )
    finally:
        service.stop()

    print()
    print("t-ETE held-out error on fresh uniform one-triplet answers (and on the planted truth)")
    print(f"human-like noise: {args.noise:.0%} of random triplets answered wrong; same dimension")
    header = f"{'data':<24} {'format':<13} {'screens':>8} {'triplets':>9} {'error':>7} {'truth':>7}"
    print(header)
    print("-" * len(header))
    for row in results:
        print(
            f"{row['data']:<24} {row['format']:<13} {row['screens']:>8} {row['triplets']:>9} "
            f"{row['error']:>7.3f} {row['truth']:>7.3f}"
        )
    print()
    for data_name in datasets:
        mine = [row for row in results if row["data"] == data_name]
        peer = max((row for row in mine if row["format"] == "triplet"), key=lambda r: r["screens"])
        for format_name in ("odd_one_out", "rank 2 of 8"):
            reached = [
                row["screens"]
                for row in mine
                if row["format"] == format_name and row["error"] <= peer["error"]
            ]
            if reached:
                print(
                    f"{data_name}: {format_name} reaches the triplets' error at "
                    f"{peer['screens']} screens ({peer['error']:.3f}) in {min(reached)} screens: "
                    f"{min(reached) / peer['screens']:.2f} of them"
                )
            else:
                print(
                    f"{data_name}: {format_name} does not reach the triplets' error at "
                    f"{peer['screens']} screens ({peer['error']:.3f}) within the screens run"
                )


if __name__ == "__main__":
    main()
