"""The job queue, kept in the `jobs` table so any number of workers can share it.

A worker claims a job with a compare-and-set update (safe on SQLite and PostgreSQL) after
choosing it with `FOR UPDATE SKIP LOCKED` on PostgreSQL, so two workers never run the same
job. A running job whose heartbeat goes stale belonged to a worker that died: it is
claimed again until it has used its attempts.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from app.core.db import rows_changed
from app.core.errors import Conflict, NotFound
from app.models import Job, JobStatus
from app.models._types import utcnow
from app.worker.wakeup import announce_job

FINISHED = (JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled)


def enqueue(
    *,
    session: Session,
    kind: str,
    project_id: int | None = None,
    params: dict[str, Any] | None = None,
    max_attempts: int = 3,
) -> Job:
    job = Job(kind=kind, project_id=project_id, params=params or {}, max_attempts=max_attempts)
    session.add(job)
    session.flush()
    announce_job(session)
    return job


def claim_next(
    *,
    session: Session,
    worker_id: str,
    stale_after: timedelta,
    kinds: Collection[str] | None = None,
    skip_kinds: Collection[str] = (),
) -> Job | None:
    """Take the oldest runnable job for this worker (of `kinds`, if given, and none of
    `skip_kinds`), or None when there is none."""
    stale_before = utcnow() - stale_after
    runnable = or_(
        Job.status == JobStatus.queued,
        and_(Job.status == JobStatus.running, Job.heartbeat_at < stale_before),
    )
    if kinds is not None:
        runnable = and_(runnable, Job.kind.in_(list(kinds)))
    if skip_kinds:
        runnable = and_(runnable, Job.kind.not_in(list(skip_kinds)))
    while True:
        query = select(Job).where(runnable).order_by(Job.created_at, Job.id).limit(1)
        if session.get_bind().dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        job = session.scalar(query)
        if job is None:
            session.rollback()
            return None
        now = utcnow()
        if job.status is JobStatus.running and job.attempts >= job.max_attempts:
            job.status = JobStatus.failed
            job.finished_at = now
            job.message = f"worker stopped answering on each of {job.attempts} attempts"
            session.commit()
            continue
        claimed = rows_changed(
            session.execute(
                update(Job)
                .where(Job.id == job.id, Job.attempts == job.attempts, runnable)
                .values(
                    status=JobStatus.running,
                    attempts=job.attempts + 1,
                    locked_by=worker_id,
                    heartbeat_at=now,
                    started_at=now,
                )
                .execution_options(synchronize_session=False)
            )
        )
        session.commit()
        if claimed:
            session.refresh(job)
            return job


def heartbeat(
    *,
    session: Session,
    job_id: int,
    worker_id: str,
    progress: float | None = None,
    message: str | None = None,
) -> bool:
    """Record liveness (and progress); returns whether cancellation was requested."""
    values: dict[str, Any] = {"heartbeat_at": utcnow()}
    if progress is not None:
        values["progress"] = min(max(progress, 0.0), 1.0)
    if message is not None:
        values["message"] = message
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.locked_by == worker_id)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    cancel = session.scalar(select(Job.cancel_requested).where(Job.id == job_id))
    session.commit()
    return bool(cancel)


def finish(
    *,
    session: Session,
    job_id: int,
    worker_id: str,
    status: JobStatus,
    message: str,
    result: dict[str, Any] | None = None,
    commit: bool = True,
) -> None:
    """End a running job; a job already ended (by its handler, in the transaction that
    stored what it made) stays as it is."""
    values: dict[str, Any] = {
        "status": status,
        "message": message,
        "finished_at": utcnow(),
        "result": result,
    }
    if status is JobStatus.succeeded:
        values["progress"] = 1.0
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.locked_by == worker_id, Job.status == JobStatus.running)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if commit:
        session.commit()


def requeue(
    *, session: Session, job_id: int, worker_id: str, message: str, failed: bool = True
) -> None:
    """Give the job back to the queue: a failed attempt keeps its count; a job its worker
    stopped before it ended (the worker shutting down) did not fail, and the next worker
    starts it over with the attempt not counted."""
    values: dict[str, Any] = {"status": JobStatus.queued, "locked_by": None, "message": message}
    if not failed:
        values.update(attempts=Job.attempts - 1, progress=0.0)
    session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.locked_by == worker_id,
            Job.status == JobStatus.running,
            Job.attempts > 0,
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    session.commit()


def request_cancel(*, session: Session, job_id: int) -> Job:
    """Cancel a queued job at once; ask a running one to stop at its next progress report."""
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    if job.status in FINISHED:
        raise Conflict(f"job {job_id} already {job.status.value}")
    if job.status is JobStatus.queued:
        job.status = JobStatus.cancelled
        job.finished_at = utcnow()
        job.message = "cancelled before it started"
    else:
        job.cancel_requested = True
    session.flush()
    return job
