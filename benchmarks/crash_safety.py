"""Crash safety at length (issue 15): a crowd answers a CompRF study over HTTP on
PostgreSQL (fsync on) while, at random moments, every web process is killed with SIGKILL
or the database stops with `pg_ctl stop -m immediate`, each then started again. Prints
each crash, what the service answered while the database was down, and whether every
acknowledged answer is stored exactly once. tests/test_crash_safety.py is the short run.

    .venv/bin/python benchmarks/crash_safety.py [--crashes 30] [--raters 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.crashes import crash_run
from tests.support.postgres import start_postgres


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crashes", type=int, default=30)
    parser.add_argument("--raters", type=int, default=50)
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--think-time", type=float, default=0.05, help="each rater's pause between answers (s)"
    )
    args = parser.parse_args()
    server = start_postgres(durable=True)
    try:
        run = crash_run(
            server=server,
            folder=Path(tempfile.mkdtemp(prefix="closer-crash-")),
            crashes=args.crashes,
            raters=args.raters,
            items=args.items,
            think_time=args.think_time,
            seed=args.seed,
        )
    finally:
        server.stop()
    print(run.table())
    database = [c.recovered_after for c in run.crashes if c.kind == "database"]
    print(
        json.dumps(
            {
                "crashes": len(run.crashes),
                "web_kills": sum(c.kind == "web" for c in run.crashes),
                "database_stops": len(database),
                "acknowledged_answers": run.acknowledged,
                "stored_twice": run.stored_twice,
                "acknowledged_missing": run.missing,
                "probes_while_database_down": dict(run.outage_statuses),
                "503_without_retry_after": run.outage_without_retry_after
                + run.report.unadvised_503,
                "crowd_5xx": dict(run.report.server_errors),
                "answering_again_after_s_max": round(max(database), 2) if database else None,
                "worker_alive": run.worker_alive,
                "build_answers_before_last_crash": run.build_answers_before_last,
                "build_answers_at_end": run.build_answers_at_end,
                "build_status": run.build_status,
                "crowd": run.report.summary(),
            },
            indent=2,
        )
    )
    ok = run.stored_twice == 0 and run.missing == 0 and set(run.outage_statuses) <= {503}
    sys.exit(0 if ok and set(run.report.server_errors) <= {503} else 1)


if __name__ == "__main__":
    main()
