"""Answer + next-query round trips on PostgreSQL with 2 web processes, as raters see them.

A real `closer serve --workers 2` and a `closer worker` run on a throwaway PostgreSQL
server, with 500 handwritten digits and a 20-tree CompRF build waiting for answers (3 per
query). Simulated raters (`closer simulate`'s engine) answer over HTTP: 100 and 300 at
once with a think time (log-normal around 1 s), then as fast as they can. Each answer is
one request: it stores the answer and returns the next comparison.

The peer, in the same run and at the same concurrency, is the service's cheapest route
(GET /api/v1/health: no database) through the same web processes and the same client:
the floor that uvicorn, FastAPI and the load generator (aiohttp) set on this machine.

    .venv/bin/python benchmarks/rating_latency.py [--seconds 30] [--raters 100,300]

With `--judgements triplet,rank,sort8`, the runs are made once per judgement format on a
study of its own (rank: "2 of 8" screens, odd_one_out: three items, sort8: a triplet
study whose build asks on sorting screens of 8), with `--random-share` of the questions
random (screens in the study's format; the rest the build's queries).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.simulate import run_crowd  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402
from tests.support.service import (  # noqa: E402
    ServiceProcesses,
    database_with_token,
    digits_study,
)

OWNER = "bench@lab.example"


def scale_study(http: httpx.Client, url: str, items: int, answers: int, trees: int) -> int:
    """A study of `items` items holding `answers` stored answers (workspace_pages' seed),
    its link open and a `trees`-tree build asking 3 answers a query, once the build's
    first step has queued its questions."""
    from workspace_pages import seed

    started = time.perf_counter()
    project = seed(url, items, 10_000, answers)
    http.patch(
        f"/api/v1/projects/{project}/rating",
        json={"answers_per_rater": 0, "random_share": 0.1, "attention_rate": 0.05},
    ).raise_for_status()
    http.put(f"/api/v1/projects/{project}/link", json={"state": "open"}).raise_for_status()
    build = http.post(
        f"/api/v1/projects/{project}/builds",
        json={"n_trees": trees, "answers_per_query": 3, "random_state": 0},
    )
    build.raise_for_status()
    path = f"/api/v1/projects/{project}/builds/{build.json()['id']}"
    deadline = time.perf_counter() + 900
    while http.get(path).json()["progress"].get("queries_pending", 0) == 0:
        if time.perf_counter() > deadline:
            raise TimeoutError("the build's first step did not queue its questions")
        time.sleep(1)
    # The first step wrote the build's queue (3 M slots): a bulk load, which autovacuum
    # then reads through, as workspace_pages' seed VACUUMs after its COPY. Done here, so
    # the crowd meets the study as it runs for days, not the minute after its start.
    import psycopg

    from app.core.db import libpq_conninfo

    with psycopg.connect(libpq_conninfo(url), autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE query_slots")
    print(
        f"  scale study: {items:,} items, {answers:,} stored answers, {trees}-tree build asking"
        f" after {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return project


async def floor(url: str, clients: int, seconds: float, think_time: float) -> dict:
    """The same load shape, with the same client library, against GET /api/v1/health."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    rng = np.random.default_rng(0)
    connector = aiohttp.TCPConnector(limit=clients + 4)
    async with aiohttp.ClientSession(url, connector=connector) as client:

        async def one():
            while time.perf_counter() < stop:
                if think_time:
                    await asyncio.sleep(float(rng.lognormal(np.log(think_time), 0.5)))
                started = time.perf_counter()
                async with client.get("/api/v1/health") as response:
                    response.raise_for_status()
                    await response.json()
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    ms = np.array(latencies) * 1000
    return {
        "per_second": len(latencies) / elapsed,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--raters", default="100,300", help="concurrent raters with think time")
    parser.add_argument("--max-raters", default="8,16,32", help="concurrencies without think time")
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--trees", type=int, default=20)
    parser.add_argument("--judgements", default="triplet", help="formats, one study each")
    parser.add_argument("--random-share", type=float, default=0.1)
    parser.add_argument(
        "--think-time", type=float, default=1.0, help="median seconds per answer for --raters"
    )
    parser.add_argument("--scale", default="", help="items:stored answers, a study of its own")
    parser.add_argument(
        "--warm-up",
        type=float,
        default=0.0,
        help="seconds of a first crowd on each study, not measured: its raters join, and "
        "the web processes load the study's items, before the measured runs",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="with --scale: after every study is set up, this many more crowds of the first "
        "--raters on the first study and the scale study in turn; the ratio is their median",
    )
    args = parser.parse_args()
    formats = {
        "triplet": {"judgement": "triplet"},
        "odd_one_out": {"judgement": "odd_one_out"},
        "rank": {"judgement": "rank", "shown": 8, "picks": 2},
        # The build's queries are what a sorting screen asks: few random questions.
        "sort8": {"judgement": "triplet", "random_share": 0.05},
    }
    sort_sizes = {"sort8": 8}

    server = start_postgres()
    root = Path(tempfile.mkdtemp(prefix="closer-rating-bench-"))
    service = None
    try:
        url, token = database_with_token(server, "rating_bench", researcher=OWNER)
        service = ServiceProcesses(url, root / "data", web_processes=2, workers=1).start()
        http = httpx.Client(
            base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )
        studies = {}
        for name in args.judgements.split(","):
            studies[name], _ = digits_study(
                service.url, token, args.items, args.trees, sort_size=sort_sizes.get(name, 1)
            )
            http.patch(
                f"/api/v1/projects/{studies[name]}/rating",
                json={"random_share": args.random_share, **formats[name]},
            ).raise_for_status()

        given: dict[int, int] = {}  # answers the crowds gave, per study

        def answered(project: int) -> int:
            build = http.get(f"/api/v1/projects/{project}/builds").json()[0]
            return build["progress"]["queries_answered"]

        def crowd(project: int, raters: int, think: float, seed: int, seconds=None) -> dict:
            report = asyncio.run(
                run_crowd(
                    url=service.url,
                    project_id=project,
                    token=token,
                    raters=raters,
                    noise=0.1,
                    think_time=think,
                    seconds=seconds or args.seconds,
                    seed=seed,
                )
            )
            summary = report.summary()
            given[project] = given.get(project, 0) + summary["answers"]
            return {
                "per_second": summary["answers_per_second"],
                "p50_ms": summary["p50_ms"],
                "p99_ms": summary["p99_ms"],
            }

        rows = []
        seed = 1
        shapes = [(int(n), args.think_time) for n in args.raters.split(",")]
        shapes += [(int(n), 0.0) for n in args.max_raters.split(",")]
        if args.scale:  # made after the others' runs: its first step is minutes of work
            items, answers = (int(n) for n in args.scale.split(":"))
            studies["scale"] = None
        for name in studies:
            if name == "scale":
                studies[name] = scale_study(http, url, items, answers, args.trees)
                scale_start = answered(studies[name])
            project = studies[name]
            if args.warm_up:
                crowd(project, shapes[0][0], args.think_time, seed=0, seconds=args.warm_up)
            for raters, think in shapes:
                if name == "scale" and think == 0:
                    continue  # the comparison is at the crowds with think time
                ours = crowd(project, raters, think, seed)
                peer = asyncio.run(floor(service.url, raters, args.seconds, think))
                rows.append((name, raters, think, ours, peer))
                seed += 1
                print(
                    f"  {name}: {raters} raters, think {think:g} s: {ours['per_second']:.0f} "
                    f"answers/s, p50 {ours['p50_ms']:.1f} ms, p99 {ours['p99_ms']:.1f} ms",
                    file=sys.stderr,
                )
        paired = []
        if args.scale:
            first = next(iter(studies))
            raters, think = shapes[0]
            for _ in range(args.rounds):
                small = crowd(studies[first], raters, think, seed)
                large = crowd(studies["scale"], raters, think, seed + 1)
                paired.append((small, large))
                seed += 2
                print(
                    f"  round {len(paired)}: {first} p99 {small['p99_ms']:.1f} ms, scale p99 "
                    f"{large['p99_ms']:.1f} ms: {large['p99_ms'] / small['p99_ms']:.2f}x",
                    file=sys.stderr,
                )
        if args.scale:
            # The build must keep up while it is measured: its steps are spaced, not skipped.
            time.sleep(3)  # the sweep's last step after the crowds
            scale_growth = answered(studies["scale"]) - scale_start
            scale_given = given[studies["scale"]]
        builds = {
            name: http.get(f"/api/v1/projects/{project}/builds").json()[0]
            for name, project in studies.items()
        }
    finally:
        if service is not None:
            service.stop()
        server.stop()

    print()
    print("answer + next query over HTTP, PostgreSQL, 2 web processes + 1 worker, this machine")
    print(f"random share {args.random_share:g}: the rest are the build's triplets")
    header = (
        f"{'format':>11} {'raters':>7} {'think':>6} | "
        f"{'answers/s':>10} {'p50 ms':>8} {'p99 ms':>8} | "
        f"{'health/s':>9} {'p50 ms':>8} {'p99 ms':>8} | {'p99 ratio':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, raters, think, ours, peer in rows:
        print(
            f"{name:>11} {raters:>7} {think:>5g}s | "
            f"{ours['per_second']:>10.0f} {ours['p50_ms']:>8.1f} {ours['p99_ms']:>8.1f} | "
            f"{peer['per_second']:>9.0f} {peer['p50_ms']:>8.1f} {peer['p99_ms']:>8.1f} | "
            f"{ours['p99_ms'] / peer['p99_ms']:>9.1f}"
        )
    if "scale" in builds:
        first = next(iter(studies))
        for raters, think in shapes:
            if think == 0:
                continue
            small = next(o for n, r, t, o, _ in rows if (n, r, t) == (first, raters, think))
            large = next(o for n, r, t, o, _ in rows if (n, r, t) == ("scale", raters, think))
            print(
                f"{raters} raters, think {think:g} s: p99 {large['p99_ms']:.1f} ms at"
                f" {args.scale} against {small['p99_ms']:.1f} ms on the {args.items}-item"
                f" {first} study: {large['p99_ms'] / small['p99_ms']:.2f}x (target <= 1.5x)"
            )
    if args.scale:
        print(
            f"scale build: {scale_growth:,} more queries answered during its crowds, which "
            f"gave {scale_given:,} answers (a tenth random, 5 % attention checks)"
        )
    if paired:
        ratios = [large["p99_ms"] / small["p99_ms"] for small, large in paired]
        print(f"rounds of {args.raters.split(',')[0]} raters, both studies set up, in turn:")
        for number, ((small, large), ratio) in enumerate(zip(paired, ratios, strict=True), 1):
            print(
                f"  {number}: p50 {small['p50_ms']:.1f} / {large['p50_ms']:.1f} ms, p99 "
                f"{small['p99_ms']:.1f} / {large['p99_ms']:.1f} ms: {ratio:.2f}x"
            )
        print(
            f"median p99 ratio over {len(ratios)} rounds: {np.median(ratios):.2f}x (target <= 1.5x)"
        )
    for name, build in builds.items():
        if name == "scale":
            continue
        best = max(
            ours["per_second"] for shown, _, think, ours, _ in rows if think == 0 and shown == name
        )
        print(f"{name}: maximum without think time: {best:.0f} answers/s (target >= 500)")
        print(
            f"{name}: build after the runs: {build['status']}, "
            f"{build['progress']['queries_answered']} queries answered, "
            f"{build['progress']['queries_pending']} pending"
        )


if __name__ == "__main__":
    main()
