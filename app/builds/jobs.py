"""The worker's side of builds: one job folds the answers that arrived into a build."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.builds import service
from app.core.db import unit_of_work
from app.models import Build, BuildStatus, Job, JobStatus
from app.worker import queue
from app.worker.loop import JobContext, handler

STEP = "comprf_build_step"


def request_step(*, session: Session, build: Build) -> Job:
    """Ask a worker to fold new answers into `build`, unless a step is already queued
    (answers that arrive meanwhile are read by that step: it starts from the cursor)."""
    waiting = session.scalar(
        select(Job).where(
            Job.kind == STEP,
            Job.status == JobStatus.queued,
            Job.project_id == build.project_id,
            Job.params["build_id"].as_integer() == build.id,
        )
    )
    if waiting is not None:
        return waiting
    return queue.enqueue(
        session=session, kind=STEP, project_id=build.project_id, params={"build_id": build.id}
    )


@handler(STEP)
def run_step(context: JobContext) -> dict[str, Any]:
    with unit_of_work(context.sessions) as session:
        build = session.get(Build, context.params["build_id"])
        if build is None:
            return {"build": "gone"}
        read = service.step(session=session, build=build)
        if build.status is BuildStatus.running and service.has_unread_answers(
            session=session, build=build
        ):
            # Answers that committed while this step ran: fold them in next.
            request_step(session=session, build=build)
        result = {
            "answers_read": read,
            "status": build.status.value,
            "queries_answered": build.queries_answered,
            "queries_pending": build.queries_pending,
        }
    context.progress(1.0, f"{read} answers folded in; build {result['status']}")
    return result
