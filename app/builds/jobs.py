"""The worker's side of builds: one job folds the answers that arrived into a build."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.builds import routing, service
from app.core import caches
from app.core.db import unit_of_work
from app.models import Build, BuildStatus, Job, JobStatus, Routing
from app.worker import queue
from app.worker.loop import JobContext, handler, periodic

STEP = "comprf_build_step"
ROUTE = "comprf_routing_step"
SWEEP_SECONDS = 2.0


def start_build(*, session: Session, project, params: service.BuildParams) -> Build:
    """Start a build and queue its first step (the API's and the workspace's way in)."""
    build = service.start_build(session=session, project=project, params=params)
    request_step(session=session, build=build)
    return build


def build_again(*, session: Session, build: Build) -> Build:
    """Build a finished build again with the answers that count now, its first step queued."""
    again = service.build_again(session=session, build=build)
    request_step(session=session, build=again)
    return again


def request_step(*, session: Session, build: Build) -> Job:
    """Ask a worker to fold new answers into `build`, unless a step is already queued
    (answers that arrive meanwhile are read by that step: it starts from the cursor)."""
    return request_step_by_id(session=session, build_id=build.id, project_id=build.project_id)


def request_step_by_id(*, session: Session, build_id: int, project_id: int) -> Job:
    return _enqueue_once(session, STEP, project_id, "build_id", build_id)


def _enqueue_once(session: Session, kind: str, project_id: int, name: str, value: int) -> Job:
    """A job of `kind` for this build or routing, unless one is already queued."""
    waiting = session.scalar(
        select(Job).where(
            Job.kind == kind,
            Job.status == JobStatus.queued,
            Job.project_id == project_id,
            Job.params[name].as_integer() == value,
        )
    )
    if waiting is not None:
        return waiting
    return queue.enqueue(session=session, kind=kind, project_id=project_id, params={name: value})


class _Recent:
    """When this process last asked for a step of each build. Answers arrive many a
    second; one request per build every half second is plenty: each step reads every
    answer committed before it started, and the worker's check for answers no step read
    catches the last ones (request_answered_steps)."""

    def __init__(self, seconds: float = 0.5) -> None:
        self.seconds = seconds
        self._last: dict[int, float] = {}
        self._lock = threading.Lock()

    def due(self, build_id: int) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(build_id, -1e9) < self.seconds:
                return False
            self._last[build_id] = now
            return True


# How often a process asks for a step of one build (or routing), at most.
STEP_REQUEST_SECONDS = 0.5


def _recent() -> _Recent:
    return caches.current().get("builds.recent_steps", lambda: _Recent(STEP_REQUEST_SECONDS))


def step_due(build_id: int) -> bool:
    """After an answer for a build arrived: whether this process asks for a step now."""
    return _recent().due(build_id)


def request_step_soon(*, session: Session, build_id: int, project_id: int) -> None:
    """After an answer for a build arrived: make sure a step will read it."""
    if step_due(build_id):
        request_step_by_id(session=session, build_id=build_id, project_id=project_id)


def _recent_routing() -> _Recent:
    return caches.current().get("builds.recent_routings", lambda: _Recent(STEP_REQUEST_SECONDS))


def routing_due(routing_id: int) -> bool:
    """After an answer to a routing query: whether this process asks for a step now."""
    return _recent_routing().due(routing_id)


def request_routing(*, session: Session, routing_id: int, project_id: int) -> None:
    _enqueue_once(session, ROUTE, project_id, "routing_id", routing_id)


def request_routing_soon(*, session: Session, routing_id: int, project_id: int) -> None:
    """After an answer to a routing query arrived: make sure a routing step reads it."""
    if routing_due(routing_id):
        request_routing(session=session, routing_id=routing_id, project_id=project_id)


@handler(ROUTE)
def run_routing(context: JobContext) -> dict[str, Any]:
    with unit_of_work(context.sessions) as session:
        routed = session.get(Routing, context.params["routing_id"])
        if routed is None:
            return {"routing": "gone"}
        routing.step(session=session, routing=routed)
        result = {"status": routed.status.value, **routed.progress}
    context.progress(1.0, f"routing {result['status']}")
    return result


@periodic(SWEEP_SECONDS)
def sweep(sessions) -> None:
    """Ask for a step of every running build whose newest answers no step has read, or
    that this worker read and has not saved yet."""
    with unit_of_work(sessions) as session:
        for build in session.scalars(select(Build).where(Build.status == BuildStatus.running)):
            if service.has_unread_answers(
                session=session, build=build
            ) or service.has_unsaved_answers(build=build):
                request_step(session=session, build=build)
        for routed in routing.unfinished(session=session):
            routing.step(session=session, routing=routed)


# How often an idle worker looks for answers to a routing or a build that no step read.
# Both ask a tree level at a time, and a crowd answers a level in a burst: the web
# processes ask for a step at most every STEP_REQUEST_SECONDS, so the burst's last answers
# waited for the sweep, up to SWEEP_SECONDS a level (the README's 3 items through 5 trees
# took 13 s of an instant simulated crowd's answers, now 7-9 s; its 5-tree build 16 s on
# average over five runs, now 14 s, with 3,300 answers given instead of 3,900). An idle
# worker's upkeep runs once a poll (1 s).
ANSWER_CHECK_SECONDS = 0.5


@periodic(ANSWER_CHECK_SECONDS)
def step_answered_routings(sessions) -> None:
    """Step every unfinished routing that answers arrived for since its last step."""
    with unit_of_work(sessions) as session:
        for routed in routing.unfinished(session=session):
            if routing.has_unread_answers(session=session, routing=routed):
                routing.step(session=session, routing=routed)


@periodic(ANSWER_CHECK_SECONDS)
def request_answered_steps(sessions) -> None:
    """Ask for a step of every running build that answers arrived for since its last
    step, unless this worker asked within STEP_REQUEST_SECONDS or the build spaces its
    steps now (a large one, by their cost)."""
    with unit_of_work(sessions) as session:
        for build in session.scalars(select(Build).where(Build.status == BuildStatus.running)):
            if (
                service.may_step(build=build)
                and service.has_unread_answers(session=session, build=build)
                and step_due(build.id)
            ):
                request_step(session=session, build=build)


@handler(STEP)
def run_step(context: JobContext) -> dict[str, Any]:
    with unit_of_work(context.sessions) as session:
        build = session.get(Build, context.params["build_id"])
        if build is None:
            return {"build": "gone"}
        if not service.may_step(build=build):
            return {"answers_read": 0, "status": build.status.value, "spaced_out": True}
        read = service.step(session=session, build=build)
        # Answers that committed while this step ran: fold them in next, but not in a
        # step straight after this one. Back to back, steps ran dozens of times a second
        # on a busy build, each with its fixed cost; the web processes ask too while
        # answers for the build arrive, and the sweep catches what is left.
        if (
            build.status is BuildStatus.running
            and step_due(build.id)
            and service.has_unread_answers(session=session, build=build)
        ):
            request_step(session=session, build=build)
        # The result says it all: a last progress report would cost the busiest job
        # kind a transaction more each time.
        return {
            "answers_read": read,
            "status": build.status.value,
            "queries_answered": build.queries_answered,
            "queries_pending": build.queries_pending,
        }
