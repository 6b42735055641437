"""The job queue explored, on both databases: hypothesis drives enqueue, claim, heartbeat,
stale takeover (time passing over a worker that died), cancel, finish and requeue in
random interleavings of several workers, against a model of what must stay true:

- a job is held by at most one worker, and what a worker that lost it does (its late
  heartbeat, finish or requeue) changes nothing;
- an ended job never starts again, and its outcome never changes;
- a job cancelled before a worker took it up never runs;
- no job runs more often than its attempts allow;
- every job ends: once the workers die and time passes, a fresh worker drains the queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import delete, select

from app.core.db import unit_of_work
from app.core.errors import Conflict
from app.models import Job, JobStatus
from app.models._types import utcnow
from app.worker import queue

STALE_AFTER = timedelta(seconds=60)
WORKERS = ("w1", "w2", "w3")
MAX_ATTEMPTS = 2


@dataclass
class Modelled:
    """What must be true of one job, whatever the interleaving."""

    status: JobStatus = JobStatus.queued
    holder: str | None = None
    beat_at: datetime | None = None
    attempts: int = 0
    cancel_requested: bool = False
    runs: list[str] = field(default_factory=list)  # the workers that took it up, in turn


class QueueMachine(RuleBasedStateMachine):
    sessions = None  # set by the test: the app's session factory

    def __init__(self) -> None:
        super().__init__()
        with unit_of_work(self.sessions) as session:
            session.execute(delete(Job))
        self.now = utcnow()
        self.jobs: dict[int, Modelled] = {}
        self.dead: set[str] = set()

    # -- the clock ----------------------------------------------------------------------

    def _clock(self) -> datetime:
        return self.now

    @rule(seconds=st.sampled_from([1, 30, 61, 200]))
    def time_passes(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    # -- what workers and researchers do ---------------------------------------------------

    @rule()
    def enqueue(self) -> None:
        with unit_of_work(self.sessions) as session:
            job = queue.enqueue(session=session, kind="fit", max_attempts=MAX_ATTEMPTS)
            self.jobs[job.id] = Modelled()

    @rule(data=st.data())
    def claim(self, data) -> None:
        worker = data.draw(st.sampled_from([w for w in WORKERS if w not in self.dead]))
        expected = self._next_claim()
        with self.sessions() as session:
            job = queue.claim_next(
                session=session, worker_id=worker, stale_after=STALE_AFTER, kinds=["fit"]
            )
        assert (job.id if job else None) == expected, (expected, job and job.id)
        if job is not None:
            model = self.jobs[job.id]
            model.status, model.holder, model.beat_at = JobStatus.running, worker, self.now
            model.attempts += 1
            model.runs.append(worker)

    def _next_claim(self) -> int | None:
        """The job the queue must hand out now, failing on the way those whose every
        attempt went stale."""
        for job_id in sorted(self.jobs):
            model = self.jobs[job_id]
            stale = (
                model.status is JobStatus.running
                and model.beat_at is not None
                and model.beat_at < self.now - STALE_AFTER
            )
            if model.status is JobStatus.queued or stale:
                if stale and model.attempts >= MAX_ATTEMPTS:
                    model.status, model.holder = JobStatus.failed, None
                    continue
                return job_id
        return None

    def _hands(self) -> list[tuple[str, int]]:
        """(worker, job) for each running job and each live worker that ran it: its
        holder, and those that lost it to a takeover and may still act on it."""
        return [
            (worker, job_id)
            for job_id, model in sorted(self.jobs.items())
            if model.status is JobStatus.running
            for worker in dict.fromkeys(model.runs)
            if worker not in self.dead
        ]

    @precondition(lambda self: self._hands())
    @rule(data=st.data())
    def heartbeat(self, data) -> None:
        worker, job_id = data.draw(st.sampled_from(self._hands()))
        with self.sessions() as session:
            cancel = queue.heartbeat(session=session, job_id=job_id, worker_id=worker)
        model = self.jobs[job_id]
        if model.holder == worker:
            model.beat_at = self.now
        assert cancel == model.cancel_requested

    @precondition(lambda self: self._hands())
    @rule(
        outcome=st.sampled_from([JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled]),
        data=st.data(),
    )
    def finish(self, outcome: JobStatus, data) -> None:
        worker, job_id = data.draw(st.sampled_from(self._hands()))
        model = self.jobs[job_id]
        # A worker that saw the cancel asked stops its job; one that did not may end it.
        if outcome is JobStatus.succeeded and model.cancel_requested and model.holder == worker:
            outcome = JobStatus.cancelled
        with self.sessions() as session:
            queue.finish(
                session=session, job_id=job_id, worker_id=worker, status=outcome, message="done"
            )
        if model.holder == worker:  # a worker that lost the job changes nothing
            model.status, model.holder = outcome, None

    @precondition(lambda self: self._hands())
    @rule(failed=st.booleans(), data=st.data())
    def requeue(self, failed: bool, data) -> None:
        worker, job_id = data.draw(st.sampled_from(self._hands()))
        model = self.jobs[job_id]
        if failed and model.attempts >= MAX_ATTEMPTS:
            return  # (the worker ends a job that failed its last attempt: see finish)
        with self.sessions() as session:
            queue.requeue(
                session=session, job_id=job_id, worker_id=worker, message="again", failed=failed
            )
        if model.holder == worker:
            model.status, model.holder = JobStatus.queued, None
            if not failed:
                model.attempts -= 1

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data())
    def cancel(self, data) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        model = self.jobs[job_id]
        try:
            with unit_of_work(self.sessions) as session:
                queue.request_cancel(session=session, job_id=job_id)
        except Conflict:
            assert model.status in queue.FINISHED
            return
        assert model.status not in queue.FINISHED
        if model.status is JobStatus.queued:
            model.status = JobStatus.cancelled
        else:
            model.cancel_requested = True

    @precondition(lambda self: len(self.dead) < len(WORKERS) - 1)
    @rule(worker=st.sampled_from(WORKERS))
    def worker_dies(self, worker: str) -> None:
        self.dead.add(worker)  # it does nothing more: its jobs go stale

    # -- what must hold after every step ------------------------------------------------

    @invariant()
    def the_queue_is_the_model(self) -> None:
        with self.sessions() as session:
            rows = {job.id: job for job in session.scalars(select(Job))}
        assert set(rows) == set(self.jobs)
        for job_id, model in self.jobs.items():
            row = rows[job_id]
            assert row.status is model.status, (job_id, row.status, model)
            assert row.attempts == model.attempts, (job_id, row.attempts, model)
            assert row.attempts <= MAX_ATTEMPTS
            assert row.cancel_requested == model.cancel_requested
            if row.status is JobStatus.running:
                assert row.locked_by == model.holder
            if row.status in queue.FINISHED:
                assert row.finished_at is not None

    def teardown(self) -> None:
        """Every job ends: the workers die, time passes, and a fresh one drains the queue
        (succeeding at each job it runs unless a cancel was asked)."""
        for _ in range(4 * len(self.jobs) + 1):
            self.now += STALE_AFTER * 2
            with self.sessions() as session:
                job = queue.claim_next(
                    session=session, worker_id="fresh", stale_after=STALE_AFTER, kinds=["fit"]
                )
            if job is None:
                break
            outcome = JobStatus.cancelled if job.cancel_requested else JobStatus.succeeded
            with self.sessions() as session:
                queue.finish(
                    session=session, job_id=job.id, worker_id="fresh", status=outcome, message="end"
                )
        with self.sessions() as session:
            statuses = {job.id: job.status for job in session.scalars(select(Job))}
        assert all(status in queue.FINISHED for status in statuses.values()), statuses
        for job_id, model in self.jobs.items():
            if model.status in queue.FINISHED:  # ended during the run: it stayed so
                assert statuses[job_id] is model.status
            if model.status is JobStatus.cancelled and not model.runs:
                assert statuses[job_id] is JobStatus.cancelled


def test_the_queue_keeps_its_promises_in_any_interleaving(app, monkeypatch):
    """200 runs on SQLite catch a finish that ignores who holds the job (tried: with
    the guard dropped, it fails); on PostgreSQL, slower a call, 100 cover its row locks."""
    examples = 200 if app.state.engine.dialect.name == "sqlite" else 100
    QueueMachine.sessions = app.state.session_factory
    clock: list[QueueMachine] = []

    class Driven(QueueMachine):
        def __init__(self) -> None:
            super().__init__()
            clock[:] = [self]

    # The queue's own clock is the machine's: heartbeats go stale as its time passes.
    monkeypatch.setattr(queue, "utcnow", lambda: clock[0]._clock())
    run_state_machine_as_test(
        Driven,
        settings=settings(
            max_examples=examples,
            stateful_step_count=30,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
