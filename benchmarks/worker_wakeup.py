"""How soon an idle worker starts a job once it is queued, against a worker that only
polls (the peer: what a worker does without a wake-up, here at the default 1 s poll).

Three ways a job reaches an idle worker:
- queued in the worker's own process (the embedded default, SQLite): the in-process bell;
- queued by another process on PostgreSQL (a web process beside `closer worker`): NOTIFY;
- queued by another process on SQLite, where nothing wakes the worker: its poll (the peer).

The tests check only that a wake-up happens (a job starts long before the worker's own
poll would come); how fast is measured here, on an otherwise idle machine.

    .venv/bin/python benchmarks/worker_wakeup.py [--jobs 30]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.core import migrations  # noqa: E402
from app.core.db import make_engine, make_session_factory, unit_of_work  # noqa: E402
from app.worker import queue  # noqa: E402
from app.worker.loop import JobContext, Worker  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402

ENQUEUE_ELSEWHERE = (
    "import sys, time\n"
    "from app.core.db import make_engine, make_session_factory, unit_of_work\n"
    "from app.worker import queue\n"
    "sessions = make_session_factory(make_engine(sys.argv[1]))\n"
    "for _ in range(int(sys.argv[2])):\n"
    "    time.sleep(float(sys.argv[3]))\n"
    "    with unit_of_work(sessions) as session:\n"
    "        job = queue.enqueue(session=session, kind='note')\n"
    "    print(job.id, time.monotonic(), flush=True)\n"
)


def _worker(sessions, started: dict, poll_seconds: float) -> tuple[Worker, threading.Thread]:
    def note(context: JobContext):
        started[context.job_id] = time.monotonic()

    worker = Worker(sessions, poll_seconds=poll_seconds, handlers={"note": note}, upkeep=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    assert worker.idle.wait(10)
    return worker, thread


def _wait(started: dict, job_id: int, seconds: float = 30.0) -> float:
    deadline = time.monotonic() + seconds
    while job_id not in started:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} did not start")
        time.sleep(0.001)
    return started[job_id]


def in_process(url: str, jobs: int) -> list[float]:
    sessions = make_session_factory(make_engine(url))
    started: dict[int, float] = {}
    worker, thread = _worker(sessions, started, poll_seconds=30)
    delays = []
    try:
        for _ in range(jobs):
            time.sleep(0.05)
            queued = time.monotonic()
            with unit_of_work(sessions) as session:
                job_id = queue.enqueue(session=session, kind="note").id
            delays.append(_wait(started, job_id) - queued)
    finally:
        worker.stop()
        thread.join(10)
    return delays


def from_another_process(url: str, jobs: int, poll_seconds: float) -> list[float]:
    sessions = make_session_factory(make_engine(url))
    started: dict[int, float] = {}
    worker, thread = _worker(sessions, started, poll_seconds=poll_seconds)
    try:
        # Spaced apart so that each job finds the worker idle, at a random point of its poll.
        output = subprocess.run(
            [sys.executable, "-c", ENQUEUE_ELSEWHERE, url, str(jobs), "0.37"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        ).stdout
        delays = []
        for line in output.split("\n"):
            if line.strip():
                job_id, queued = line.split()
                delays.append(_wait(started, int(job_id)) - float(queued))
    finally:
        worker.stop()
        thread.join(10)
    return delays


def _row(name: str, delays: list[float], peer: float) -> str:
    ordered = sorted(delays)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000
    ratio = peer / max(p50, 1e-6)
    return f"| {name} | {p50:.1f} | {p99:.1f} | {ratio:.0f}x sooner |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30)
    args = parser.parse_args()
    # The last worker's listener loses its server as the benchmark stops it: not news.
    logging.getLogger("app.worker.wakeup").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as folder:
        sqlite_url = f"sqlite:///{folder}/wakeup.db"
        migrations.upgrade(sqlite_url)
        server = start_postgres()
        try:
            postgres_url = server.create_database("closer_wakeup")
            migrations.upgrade(postgres_url)
            polled = from_another_process(sqlite_url, args.jobs, poll_seconds=1.0)
            bell = in_process(sqlite_url, args.jobs)
            notify = from_another_process(postgres_url, args.jobs, poll_seconds=30)
        finally:
            server.stop()
    peer = statistics.median(polled) * 1000
    print("| a job queued … | p50 ms | p99 ms | against the 1 s poll (p50) |")
    print("| --- | --- | --- | --- |")
    print(_row("in the worker's process (bell)", bell, peer))
    print(_row("by another process on PostgreSQL (NOTIFY)", notify, peer))
    print(_row("by another process on SQLite (the peer: the 1 s poll)", polled, peer))


if __name__ == "__main__":
    main()
