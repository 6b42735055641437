"""CompRF on sorting screens against one triplet per screen, by a simulated crowd over HTTP
on PostgreSQL, in the same run.

`closer serve` (2 web processes) and `closer worker` run as processes on a throwaway
PostgreSQL server; simulated raters (human-like noise: wrong on near ties, applied to
each item of a screen on its own) answer until a 10-tree build on 300 labelled digits
completes, once with `sort_size` 1 (the peer: one triplet a screen) and once with each
size asked for. Reported per size: screens answered to complete the build (random
questions and attention checks included, as raters see them), the triplets they gave,
screens against the peer's, and held-out accuracy on 100 test digits (routed by the
same noisy oracle) against the peer's.

What it cannot tell: a person takes longer over a screen of 8 items than over a
triplet. The rating pages record each screen's time to answer (judgements'
response_time_ms), so a real study can compare the cost per triplet.

    .venv/bin/python benchmarks/sorting_screens.py [--sizes 8] [--raters 50] [--seeds 0]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.core import migrations  # noqa: E402
from app.core.db import make_engine, make_session_factory  # noqa: E402
from tests.support.crowd import crowd_build  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8", help="sort sizes to compare with 1")
    parser.add_argument("--raters", type=int, default=50)
    parser.add_argument("--trees", type=int, default=10)
    parser.add_argument("--items", type=int, default=400, help="digits, --test of them held out")
    parser.add_argument("--test", type=int, default=100)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--noise-model", choices=["human", "uniform"], default="human")
    parser.add_argument("--seeds", default="0", help="one run per seed and size, averaged")
    args = parser.parse_args()
    sizes = [1, *(int(size) for size in args.sizes.split(",") if int(size) != 1)]
    seeds = [int(seed) for seed in args.seeds.split(",")]

    server = start_postgres()
    results: dict[int, list] = {size: [] for size in sizes}
    try:
        for seed in seeds:
            for size in sizes:
                url = server.create_database(f"sort_{size}_{seed}")
                migrations.upgrade(url)
                engine = make_engine(url)
                result = crowd_build(
                    database_url=url,
                    sessions=make_session_factory(engine),
                    folder=Path(tempfile.mkdtemp(prefix="closer-sort-")),
                    n_items=args.items,
                    n_test=args.test,
                    trees=args.trees,
                    raters=args.raters,
                    noise=args.noise,
                    noise_model=args.noise_model,
                    answers_per_query=1,
                    seed=seed,
                    sort_size=size,
                )
                engine.dispose()
                if result.report.summary()["build_status"] != "complete":
                    raise SystemExit(f"sort_size {size}, seed {seed}: the build did not complete")
                results[size].append(result)
                print(
                    f"  sort_size {size:2d} seed {seed}: {result.acknowledged} screens "
                    f"({result.build_screens} of the build's queries), {result.build_queries} "
                    f"queries, accuracy {result.accuracy:.3f}, by purpose "
                    f"{ {purpose.name: n for purpose, n in result.screens.items()} }",
                    flush=True,
                )
    finally:
        server.stop()

    def mean(values) -> float:
        return sum(values) / len(values)

    peer_screens = mean([r.build_screens for r in results[1]])
    peer_all = mean([r.acknowledged for r in results[1]])
    peer_accuracy = mean([r.accuracy for r in results[1]])
    print()
    print(
        f"CompRF, {args.trees} trees on {args.items - args.test} labelled digits, by "
        f"{args.raters} simulated raters over HTTP (PostgreSQL), {args.noise_model} noise "
        f"{args.noise:.0%} per decision, seeds {args.seeds}; peer: one triplet per screen"
    )
    print(
        "build screens: those that asked the build's queries; all screens: with the random "
        "questions and checks answered meanwhile (more of them while raters wait for the "
        "build's next nodes)"
    )
    print(
        f"{'sort_size':>9}  {'build screens':>13}  {'/peer':>6}  {'all screens':>11}  "
        f"{'/peer':>6}  {'queries':>8}  {'accuracy':>8}  {'vs peer':>8}  {'p50 ms':>6}"
    )
    for size in sizes:
        runs = results[size]
        screens = mean([r.build_screens for r in runs])
        every = mean([r.acknowledged for r in runs])
        accuracy = mean([r.accuracy for r in runs])
        queries = mean([r.build_queries for r in runs])
        p50 = mean([r.report.summary()["p50_ms"] for r in runs])
        print(
            f"{size:>9}  {screens:>13.0f}  {screens / peer_screens:>6.3f}  {every:>11.0f}  "
            f"{every / peer_all:>6.3f}  {queries:>8.0f}  {accuracy:>8.3f}  "
            f"{100 * (accuracy - peer_accuracy):>+7.1f}p  {p50:>6.0f}"
        )


if __name__ == "__main__":
    main()
