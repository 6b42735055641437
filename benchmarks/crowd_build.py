"""A CompRF build by a simulated crowd over HTTP on PostgreSQL, at the issue's size.

`closer serve` (2 web processes) and `closer worker` run as processes on a throwaway
PostgreSQL server; 50 simulated raters answer with 10% noise (3 answers per query) until
a 20-tree build on 500 labelled digits completes; with --kills the web server is killed
with SIGKILL at those answer counts and restarted. Reported: time, answers, answers
stored twice or acknowledged but missing, and held-out accuracy (test digits routed with
the same noise) against the peer, the library's offline CompRF with the same noise and
redundancy, in the same run.

    .venv/bin/python benchmarks/crowd_build.py [--raters 50] [--trees 20] [--items 600]
        [--kills 20000,60000]
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
    parser.add_argument("--raters", type=int, default=50)
    parser.add_argument("--trees", type=int, default=20)
    parser.add_argument("--items", type=int, default=600, help="digits, 100 of them held out")
    parser.add_argument("--test", type=int, default=100)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--answers-per-query", type=int, default=3)
    parser.add_argument("--kills", default="", help="answer counts at which to SIGKILL the server")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    server = start_postgres()
    try:
        url = server.create_database("crowd_bench")
        migrations.upgrade(url)
        engine = make_engine(url)
        result = crowd_build(
            database_url=url,
            sessions=make_session_factory(engine),
            folder=Path(tempfile.mkdtemp(prefix="closer-crowd-")),
            n_items=args.items,
            n_test=args.test,
            trees=args.trees,
            raters=args.raters,
            noise=args.noise,
            answers_per_query=args.answers_per_query,
            kill_at=tuple(int(n) for n in args.kills.split(",") if n),
            seed=args.seed,
        )
        engine.dispose()
    finally:
        server.stop()
    summary = result.report.summary()
    print()
    print(
        f"CompRF build by {args.raters} simulated raters over HTTP (PostgreSQL, 2 web processes),"
        f" {args.trees} trees on {args.items - args.test} labelled digits, noise {args.noise:.0%},"
        f" {args.answers_per_query} answers per query, {result.kills} SIGKILLs of the server"
    )
    print(f"  build status           {summary['build_status']}")
    print(f"  wall time              {result.seconds:.0f} s")
    print(
        f"  answers acknowledged   {result.acknowledged} ({summary['answers_per_second']}/s,"
        f" p50 {summary['p50_ms']} ms, p99 {summary['p99_ms']} ms, {summary['retries']} retries)"
    )
    print(f"  stored twice           {result.stored_twice}")
    print(f"  acknowledged, missing  {result.acknowledged_missing}")
    print(
        f"  distinct queries       build {result.build_queries}, offline {result.offline_queries}"
    )
    gap = 100 * (result.accuracy - result.offline_accuracy)
    print(
        f"  held-out accuracy      crowd {result.accuracy:.3f}  offline (peer) "
        f"{result.offline_accuracy:.3f}  difference {gap:+.1f} points"
    )


if __name__ == "__main__":
    main()
