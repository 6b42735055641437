"""Rater quality decisions and what follows from them: when a rater's answers stop (or
start again) counting, the project's unfinished builds are replayed without (or with)
them, in the worker."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.builds import jobs as build_jobs
from app.builds import service as builds
from app.models import Project, Rater
from app.raters import service as raters


def replay_builds(*, session: Session, project: Project) -> None:
    for build in builds.unfinished_builds(session=session, project_id=project.id):
        builds.replay(session=session, build=build)
        build_jobs.request_step(session=session, build=build)


def refresh(*, session: Session, project: Project) -> list[Rater]:
    changed = raters.refresh_majority_agreement(session=session, project=project)
    if changed:
        replay_builds(session=session, project=project)
    return changed


def decide(*, session: Session, project: Project, rater: Rater, excluded: bool | None) -> None:
    if raters.set_override(session=session, project=project, rater=rater, excluded=excluded):
        replay_builds(session=session, project=project)
