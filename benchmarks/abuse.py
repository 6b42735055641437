"""Honest raters while strangers abuse a public link, with the rate limits on (issue 15).

A real `closer serve --workers 2` and a `closer worker` on a throwaway PostgreSQL server,
500 handwritten digits and a 20-tree CompRF build waiting for answers. 300 simulated
honest raters answer with a think time (log-normal around 1 s), each from an address of
its own (X-Forwarded-For, which uvicorn takes from a proxy on 127.0.0.1) and without the
researcher's token, so every limit applies to them. First alone; then while, from one
address, bursts of joins arrive (224 in 2.5 s, again and again) and one joined session
answers as fast as it can (at most 180 a second).

The peer, in the same run: the same honest crowd with no abuse. Reported: the honest
raters' answers/s and p50/p99 in both runs and their ratio; how many of the abusers'
joins and answers got through and how many were refused 429; and the build's queries
leased when the join bursts end (joining leases nothing).

    .venv/bin/python benchmarks/abuse.py [--seconds 30] [--raters 300]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.simulate import run_crowd  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402
from tests.support.service import (  # noqa: E402
    ServiceProcesses,
    database_with_token,
    digits_study,
)

API = "/api/v1"
ABUSER = {"X-Forwarded-For": "198.51.100.66"}


async def join_bursts(url: str, slug: str, stop: asyncio.Event, statuses: Counter) -> None:
    """224 joins in 2.5 s from one address, then again, until told to stop."""
    async with aiohttp.ClientSession(url) as client:
        while not stop.is_set():
            started = time.perf_counter()
            for _ in range(224):
                async with client.post(
                    f"{API}/rate/{slug}/raters", json={}, headers=ABUSER
                ) as response:
                    statuses[response.status] += 1
                await asyncio.sleep(max(0.0, 2.5 / 224 - 0.001))
            await asyncio.sleep(max(0.0, 2.5 - (time.perf_counter() - started)))


async def fast_answers(url: str, slug: str, stop: asyncio.Event, statuses: Counter) -> None:
    """One session answering as fast as the server lets it, at most 180 a second."""
    headers = {"X-Forwarded-For": "198.51.100.67"}
    async with aiohttp.ClientSession(url) as client:
        async with client.post(f"{API}/rate/{slug}/raters", json={}, headers=headers) as r:
            headers["X-Rater-Token"] = (await r.json())["rater_token"]
        async with client.get(f"{API}/rate/{slug}/next", headers=headers) as r:
            state = await r.json()
        while not stop.is_set() and state.get("comparison"):
            body = {"query_id": state["comparison"]["query_id"], "choice": "left"}
            async with client.post(
                f"{API}/rate/{slug}/answers", json=body, headers=headers
            ) as response:
                statuses[response.status] += 1
                if response.status == 200:
                    state = await response.json()
            await asyncio.sleep(1 / 180)


async def _abuse(url: str, slug: str, seconds: float) -> tuple[Counter, Counter]:
    stop = asyncio.Event()
    joins: Counter = Counter()
    answers: Counter = Counter()
    tasks = [
        asyncio.create_task(join_bursts(url, slug, stop, joins)),
        asyncio.create_task(fast_answers(url, slug, stop, answers)),
    ]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return joins, answers


def abuse(url: str, slug: str, seconds: float, results) -> None:
    """The abusers, in a process of their own: in the honest crowd's event loop they
    would delay its clients, and the latency measured would be the load generator's."""
    results.put(asyncio.run(_abuse(url, slug, seconds)))


async def honest_crowd(url, project, token, raters, seconds, seed, abuse_slug=None):
    joins: Counter = Counter()
    answers: Counter = Counter()
    abuser = None
    if abuse_slug is not None:
        results = multiprocessing.Queue()
        abuser = multiprocessing.Process(target=abuse, args=(url, abuse_slug, seconds, results))
        abuser.start()
    try:
        report = await run_crowd(
            url=url,
            project_id=project,
            token=token,
            raters=raters,
            noise=0.1,
            think_time=1.0,
            seconds=seconds,
            seed=seed,
            throttled=True,
            own_addresses=True,
        )
    finally:
        if abuser is not None:
            joins, answers = results.get(timeout=seconds + 60)
            abuser.join()
    return report.summary(), joins, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--raters", type=int, default=300)
    parser.add_argument("--items", type=int, default=500)
    args = parser.parse_args()

    server = start_postgres()
    root = Path(tempfile.mkdtemp(prefix="closer-abuse-bench-"))
    service = None
    try:
        url, token = database_with_token(server, "abuse_bench")
        service = ServiceProcesses(url, root / "data", web_processes=2, workers=1).start()
        project, slug = digits_study(service.url, token, args.items)
        http = httpx.Client(
            base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )
        calm, _, _ = asyncio.run(
            honest_crowd(service.url, project, token, args.raters, args.seconds, 1)
        )
        print(f"  calm:   {calm}", file=sys.stderr)
        abused, joins, answers = asyncio.run(
            honest_crowd(service.url, project, token, args.raters, args.seconds, 2, slug)
        )
        print(f"  abused: {abused}", file=sys.stderr)
        build = http.get(f"{API}/projects/{project}/builds").json()[0]
    finally:
        if service is not None:
            service.stop()
        server.stop()

    print()
    print(
        f"{args.raters} honest raters (think 1 s, each its own address, rate limits on) on "
        "PostgreSQL, 2 web processes + 1 worker, this machine"
    )
    header = f"{'':<22} {'answers/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'429s':>6}"
    print(header)
    print("-" * len(header))
    for name, summary in (("alone (peer)", calm), ("during the abuse", abused)):
        print(
            f"{name:<22} {summary['answers_per_second']:>10.1f} {summary['p50_ms']:>8.1f} "
            f"{summary['p99_ms']:>8.1f} {summary['throttled']:>6}"
        )
    ratio = abused["p99_ms"] / calm["p99_ms"]
    print(f"p99 ratio, abused / alone: {ratio:.2f} (target p99 < 100 ms)")
    print(
        f"join bursts from one address: {joins[201]} joined, {joins[429]} refused 429 "
        f"(of {sum(joins.values())})"
    )
    print(
        f"one session answering flat out: {answers[200]} answers taken, {answers[429]} refused "
        f"429 (of {sum(answers.values())})"
    )
    print(
        f"build after the runs: {build['status']}, {build['progress']['queries_answered']} "
        f"queries answered, {build['progress']['queries_pending']} pending"
    )


if __name__ == "__main__":
    main()
