"""Crash safety as users would meet it (issue 15): a simulated crowd answers a CompRF
study over HTTP on PostgreSQL while, at random moments, every web process is killed with
SIGKILL or the database server is stopped with `pg_ctl stop -m immediate` (as a power
cut would stop it), each then started again. Used by tests/test_crash_safety.py (a short
run in CI) and benchmarks/crash_safety.py (a long one).

What it measures: whether every answer the server acknowledged is stored exactly once;
what the service answered while the database was down (503 with Retry-After, never
500); how long after the database came back the service answered again by itself,
without a restart; and whether the worker and the build carried on."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import func, select

from app.core.db import make_engine, make_session_factory
from app.models import Build, BuildStatus, Judgement, Triplet
from app.simulate import CrowdReport
from tests.support.crowd import acknowledged_storage, crowd_in_thread
from tests.support.postgres import PostgresServer
from tests.support.service import ServiceProcesses, database_with_token, digits_study

API = "/api/v1"


@dataclass
class Crash:
    kind: str  # "web" (SIGKILL of every web process) or "database" (pg_ctl -m immediate)
    at: float  # seconds into the run
    down: float  # seconds until it was started again
    recovered_after: float | None = None  # from the restart to a researcher's 200


@dataclass
class CrashRun:
    crashes: list[Crash]
    report: CrowdReport
    acknowledged: int
    stored_twice: int
    missing: int
    outage_statuses: Counter = field(default_factory=Counter)  # probes while it was down
    outage_without_retry_after: int = 0
    worker_alive: bool = False
    build_answers_before_last: int = 0
    build_answers_at_end: int = 0
    build_status: str = ""
    judgements: Counter = field(default_factory=Counter)  # screens stored, by format

    def table(self) -> str:
        lines = [
            "| # | kind | at (s) | down (s) | answering again after (s) |",
            "|---|---|---|---|---|",
        ]
        for number, crash in enumerate(self.crashes, start=1):
            again = "-" if crash.recovered_after is None else f"{crash.recovered_after:.2f}"
            lines.append(
                f"| {number} | {crash.kind} | {crash.at:.1f} | {crash.down:.1f} | {again} |"
            )
        return "\n".join(lines)


def _probe(url: str, token: str, project_id: int, slug: str) -> list[httpx.Response]:
    """What a researcher, a new rater and an API client asking for a page get now."""
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, timeout=10) as http:
        return [
            http.get(f"{API}/projects/{project_id}", headers=auth),
            http.post(f"{API}/rate/{slug}/raters", json={}),
            http.get(f"{API}/projects/{project_id}/triplets/export?format=json", headers=auth),
        ]


def _answering_again(url: str, token: str, project_id: int, limit: float = 60.0) -> float:
    started = time.monotonic()
    auth = {"Authorization": f"Bearer {token}"}
    while time.monotonic() - started < limit:
        try:
            response = httpx.get(f"{url}{API}/projects/{project_id}", headers=auth, timeout=5)
            if response.status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"the service did not answer within {limit} s of the restart")


def crash_run(
    *,
    server: PostgresServer,
    folder: Path,
    crashes: int = 10,
    raters: int = 20,
    items: int = 150,
    gaps: tuple[float, float] = (2.0, 5.0),
    downtime: tuple[float, float] = (1.0, 3.0),
    think_time: float = 0.2,
    seed: int = 0,
    rating: dict | None = None,
    sort_size: int = 1,
) -> CrashRun:
    """`server` must be one this run may crash (it is started again each time);
    `rating`: settings for the study (a judgement format, say); `sort_size`: the build's
    items per sorting screen; `think_time`: each rater's pause between answers (the
    crowd answers until the last crash is over, so its pace sets the run's CPU, not how
    many requests are cut off by a crash: every one in flight, and every one sent while
    the web is down, is)."""
    rng = random.Random(seed)
    url, token = database_with_token(server, f"crash_{seed}")
    service = ServiceProcesses(url, folder, web_processes=2, workers=1).start()
    done = threading.Event()
    happened: list[Crash] = []
    run = CrashRun(
        crashes=happened, report=CrowdReport(), acknowledged=0, stored_twice=0, missing=0
    )
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    try:
        project_id, slug = digits_study(service.url, token, items, trees=5, sort_size=sort_size)
        if rating:
            auth = {"Authorization": f"Bearer {token}"}
            if callable(rating.get("practice")):  # made of the study's item keys
                listed = httpx.get(
                    f"{service.url}/api/v1/projects/{project_id}/items", headers=auth
                ).json()
                keys = [item["key"] for item in listed["items"]]
                rating = {**rating, "practice": rating["practice"](keys)}
            httpx.patch(
                f"{service.url}/api/v1/projects/{project_id}/rating", headers=auth, json=rating
            ).raise_for_status()

        runner, outcome = crowd_in_thread(
            url=service.url,
            project_id=project_id,
            token=token,
            raters=raters,
            think_time=think_time,
            seed=seed,
            until=done,
            timeout=15,
        )
        started = time.monotonic()
        kinds = ["web", "database"] * (crashes // 2) + ["database"] * (crashes % 2)
        rng.shuffle(kinds)
        for kind in kinds:
            time.sleep(rng.uniform(*gaps))
            if not runner.is_alive():
                break
            with sessions() as session:
                run.build_answers_before_last = _build_answers(session)
            crash = Crash(kind, time.monotonic() - started, 0.0)
            if kind == "web":
                service.kill_web()
                service.start_web()  # returns once it answers again
                crash.down = time.monotonic() - started - crash.at
            else:
                server.crash()
                pause = rng.uniform(*downtime)
                time.sleep(pause / 2)
                for response in _probe(service.url, token, project_id, slug):
                    run.outage_statuses[response.status_code] += 1
                    if response.status_code == 503 and "Retry-After" not in response.headers:
                        run.outage_without_retry_after += 1
                time.sleep(pause / 2)
                crash.down = time.monotonic() - started - crash.at
                server.start()
                crash.recovered_after = _answering_again(service.url, token, project_id)
            happened.append(crash)
        time.sleep(max(gaps))  # answers after the last crash
        done.set()
        runner.join(timeout=120)
        if "error" in outcome:
            raise outcome["error"]
        run.report = outcome["report"]
        run.worker_alive = all(worker.poll() is None for worker in service.workers)
        _until_build_read_every_answer(sessions)
        with sessions() as session:
            run.build_answers_at_end = _build_answers(session)
            run.build_status = session.scalars(select(Build)).one().status.value
            run.judgements = Counter(
                dict(
                    session.execute(
                        select(Judgement.format, func.count()).group_by(Judgement.format)
                    ).all()
                )
            )
            run.acknowledged = len(run.report.acknowledged)
            run.stored_twice, run.missing = acknowledged_storage(
                session, project_id, run.report.acknowledged
            )
    finally:
        done.set()
        service.stop()
        engine.dispose()
    return run


def _until_build_read_every_answer(sessions, timeout: float = 60.0) -> None:
    """Until the worker folded the last answers into the build (or it needs no more)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sessions() as session:
            build = session.scalars(select(Build)).one()
            newest = session.scalar(select(func.max(Triplet.id))) or 0
            if build.status is not BuildStatus.running or build.answers_cursor >= newest:
                return
        time.sleep(0.2)
    raise AssertionError(f"the build had not read answers up to triplet {newest} in {timeout} s")


def _build_answers(session) -> int:
    build = session.scalars(select(Build)).one()
    return build.queries_answered
