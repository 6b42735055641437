"""What one answer costs inside PostgreSQL, for two versions of Closer in one run: the
mean time of `closer_answer()` (PostgreSQL's own count, `track_functions = 'pl'`), how
many answers it took, and how many updates of the tables an answer writes stayed HOT
(heap-only: no index written), beside the crowd's p50 and p99. The answer path's
latency at 300 raters (benchmarks/answer_path_versions.py) says whether a change is
slower; this says where.

Each version runs as there (its own checkout, PostgreSQL server, `closer serve --workers
2` and a `closer worker`, the digits study and its build); after an unmeasured crowd for
each, the statistics are reset and one crowd is counted, base first, each version's
service stopped after its count. One crowd's p50 and p99 are noisy (answer_path_versions
takes turns for them); the function's mean time is steadier: the same code as base and
head gave 1.12 and 1.04 ms (p50 9.0 and 7.5 ms).

    .venv/bin/python benchmarks/answer_function_cost.py --base 219e1b1 [--seconds 30]
        [--raters 300]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from answer_path_versions import REPO, Version, checkout

from app.core.db import libpq_conninfo

TABLES = ("assignments", "query_slots", "raters", "triplets")


def connect(version: Version, database: str) -> psycopg.Connection:
    return psycopg.connect(libpq_conninfo(version.server.url(database)), autocommit=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--raters", type=int, default=300)
    parser.add_argument("--think-time", type=float, default=1.0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="closer-answer-cost-"))
    versions: list[Version] = []
    try:
        for name, tree in (("base", checkout(args.base)), ("head", REPO)):
            version = Version(name, tree, folder, 500, 20)
            versions.append(version)
            with connect(version, "postgres") as admin:
                admin.execute("ALTER SYSTEM SET track_functions = 'pl'")
                admin.execute("SELECT pg_reload_conf()")
        for version in versions:
            version.crowd(args.raters, args.think_time, args.seconds / 2, seed=1)  # warm-up
        rows = []
        for version in versions:
            with connect(version, version.database) as db:
                db.execute("SELECT pg_stat_reset()")
            crowd = version.crowd(args.raters, args.think_time, args.seconds, seed=2)
            with connect(version, version.database) as db:
                calls, total = db.execute(
                    "SELECT calls, total_time FROM pg_stat_user_functions "
                    "WHERE funcname = 'closer_answer'"
                ).fetchone() or (0, 0.0)
                updates = {
                    table: f"{hot} of {updated}"
                    for table, updated, hot in db.execute(
                        "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                        "WHERE relname = ANY(%s)",
                        (list(TABLES),),
                    )
                }
            rows.append((version.name, crowd, calls, total, updates))
            # Its worker would go on stepping the build on the cores the next crowd uses.
            version.service.stop()
    finally:
        for version in versions:
            version.service.stop()
            version.server.stop()

    print(
        f"\none answer inside PostgreSQL, {args.raters} raters, {args.seconds:.0f} s, "
        f"base {args.base} vs the working tree"
    )
    header = f"{'':6}{'answers/s':>10}{'p50 ms':>8}{'p99 ms':>8}{'calls':>7}{'mean ms':>9}"
    print(header + "".join(f"{table + ' HOT':>20}" for table in TABLES))
    for name, crowd, calls, total, updates in rows:
        latencies = crowd["latencies_ms"]
        hot = "".join(f"{updates.get(table, '0 of 0'):>20}" for table in TABLES)
        print(
            f"{name:6}{crowd['per_second']:>10.1f}{np.percentile(latencies, 50):>8.1f}"
            f"{np.percentile(latencies, 99):>8.1f}{calls:>7}{total / max(calls, 1):>9.3f}" + hot
        )


if __name__ == "__main__":
    main()
